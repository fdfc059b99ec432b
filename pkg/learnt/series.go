package learnt

import "time"

// series is a bounded record of values by key, each key's oldest first:
// what is older than keep drops out, a key keeps at most perKey values,
// and with maxKeys > 0 at most maxKeys keys are kept, the stalest evicted
// first. Its owner locks.
type series[K comparable, V any] struct {
	m map[K][]entry[V]
}

type entry[V any] struct {
	at time.Time
	v  V
}

// add records v for k at at.
func (s *series[K, V]) add(k K, at time.Time, v V, keep time.Duration, perKey, maxKeys int) {
	if s.m == nil {
		s.m = map[K][]entry[V]{}
	}
	e, known := s.m[k]
	for len(e) > 0 && (at.Sub(e[0].at) > keep || len(e) >= perKey) {
		e = e[1:]
	}
	if !known && maxKeys > 0 && len(s.m) >= maxKeys {
		s.evict(at, keep, maxKeys)
	}
	s.m[k] = append(e, entry[V]{at: at, v: v})
}

// evict drops the keys whose newest value is older than keep, or, when
// none is, the one whose newest value is the oldest.
func (s *series[K, V]) evict(now time.Time, keep time.Duration, maxKeys int) {
	var oldest K
	var oldestAt time.Time
	for k, e := range s.m {
		at := e[len(e)-1].at
		if now.Sub(at) > keep {
			delete(s.m, k)
			continue
		}
		if oldestAt.IsZero() || at.Before(oldestAt) {
			oldest, oldestAt = k, at
		}
	}
	if len(s.m) >= maxKeys {
		delete(s.m, oldest)
	}
}

// each calls f with k's values no older than keep before now, oldest
// first, and their ages.
func (s *series[K, V]) each(k K, now time.Time, keep time.Duration, f func(age time.Duration, v V)) {
	for _, e := range s.m[k] {
		if a := now.Sub(e.at); a <= keep {
			f(a, e.v)
		}
	}
}

// len is how many keys are kept.
func (s *series[K, V]) len() int { return len(s.m) }
