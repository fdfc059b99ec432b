package rules

// keywordIndex finds the first DOMAIN-KEYWORD rule a name contains in one
// pass over the name, whatever the number of keywords (tried one by one,
// a thousand keywords cost a lookup microseconds): an Aho-Corasick
// automaton over the keywords, completed into a table of transitions on
// the bytes the keywords use. Its size is states × symbols × 4 bytes: a
// state per keyword byte, a symbol per distinct byte (names have about
// 40).
type keywordIndex struct {
	sym  [256]uint8 // byte -> symbol; 0: a byte in no keyword
	nsym int        // symbols, 0 included
	next []int32    // state*nsym + symbol -> the state after it
	// first is, per state, the smallest rule index among the keywords
	// that end at it (the keywords its path ends with); none when none.
	first []int32
}

// buildKeywords indexes kws (in file order).
func buildKeywords(kws []indexed[string]) keywordIndex {
	k := keywordIndex{nsym: 1}
	for _, kw := range kws {
		for i := 0; i < len(kw.v); i++ {
			if c := kw.v[i]; k.sym[c] == 0 {
				k.sym[c] = uint8(k.nsym)
				k.nsym++
			}
		}
	}
	// The trie: -1 for no child yet.
	k.addState()
	for _, kw := range kws {
		s := int32(0)
		for i := 0; i < len(kw.v); i++ {
			t := int(s)*k.nsym + int(k.sym[kw.v[i]])
			if k.next[t] < 0 {
				c := k.addState() // grows k.next: index it after
				k.next[t] = c
			}
			s = k.next[t]
		}
		k.first[s] = min(k.first[s], kw.idx)
	}
	k.complete()
	return k
}

func (k *keywordIndex) addState() int32 {
	for range k.nsym {
		k.next = append(k.next, -1)
	}
	k.first = append(k.first, none)
	return int32(len(k.first) - 1)
}

// complete turns the trie into the automaton's table, breadth first:
// each state's missing transitions are its failure state's (the longest
// proper suffix of its path that is a trie path), and its first takes its
// failure state's too (a keyword ending a suffix of the path ends here).
func (k *keywordIndex) complete() {
	fail := make([]int32, len(k.first))
	var queue []int32
	for a := 0; a < k.nsym; a++ {
		if c := k.next[a]; c > 0 {
			queue = append(queue, c) // fail[c] = 0, the root
		} else {
			k.next[a] = 0
		}
	}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for a := 0; a < k.nsym; a++ {
			i := int(u)*k.nsym + a
			f := k.next[int(fail[u])*k.nsym+a] // complete: fail[u] is shallower
			if v := k.next[i]; v > 0 {
				fail[v] = f
				k.first[v] = min(k.first[v], k.first[f])
				queue = append(queue, v)
			} else {
				k.next[i] = f
			}
		}
	}
}

// firstIn is the smallest rule index among the keywords name contains;
// none when it contains none.
func (k *keywordIndex) firstIn(name string) int32 {
	best, s := int32(none), 0
	for i := 0; i < len(name); i++ {
		s = int(k.next[s*k.nsym+int(k.sym[name[i]])])
		if f := k.first[s]; f < best {
			best = f
		}
	}
	return best
}
