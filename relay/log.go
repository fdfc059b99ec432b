package relay

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds the root logger. format is "console" or "json".
func NewLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("log format %q: want console or json", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil // every denial must be logged (docs/reliability.md case 21)
	return cfg.Build()
}

// sampler lets a repeated warning through at most once per interval per
// rule, counting the ones it held back: a flood of refusals (a scan, slot
// exhaustion) must not become a flood of log lines. The metrics count
// every one.
type sampler struct {
	mu       sync.Mutex
	interval time.Duration
	last     map[string]time.Time
	held     map[string]int
}

// allow says whether to log now, and how many were held back since the
// last line.
func (s *sampler) allow(rule string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last, s.held = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if now.Sub(s.last[rule]) < s.interval {
		s.held[rule]++
		return 0, false
	}
	n := s.held[rule]
	s.last[rule], s.held[rule] = now, 0
	return n, true
}
