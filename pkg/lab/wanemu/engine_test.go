package wanemu

import (
	"runtime"
	"strings"
	"testing"
)

func TestConfigFromEnv(t *testing.T) {
	// A standby thread needs a second CPU.
	threads := "1 thread"
	if runtime.NumCPU() > 1 {
		threads = "2 thread"
	}
	for _, tc := range []struct {
		env  map[string]string
		want string // Config.String(), or an error's text
	}{
		{map[string]string{EnvSteer: "0"}, "sched/1 shard/" + threads + "/offload/no-steer/wake-early 0 us/join-early 250 us/keep-awake"},
		{map[string]string{EnvEngine: "thread", EnvKeepAwake: "0"}, "thread/cpus-may-idle"},
		{map[string]string{EnvOffload: "0", EnvJoinEarly: "0", EnvWakeEarly: "50", EnvSteer: "0"}, "sched/1 shard/" + threads + "/no-offload/no-steer/wake-early 50 us/join-early 0 us/keep-awake"},
		{map[string]string{EnvSteer: "2"}, "want 0 or 1"},
		{nil, "sched/1 shard/" + threads + "/offload/no-steer/wake-early 0 us/join-early 250 us/keep-awake"},
		{map[string]string{EnvEngine: "netem"}, "want sched or thread"},
		{map[string]string{EnvShards: "0"}, "want 1-64"},
		{map[string]string{EnvJoinEarly: "20000"}, "at most 10000"},
		{map[string]string{EnvKeepAwake: "yes"}, "want 0 or 1"},
		{map[string]string{EnvStandby: "0"}, "sched/1 shard/1 thread/"},
		{map[string]string{EnvSteer: "1", EnvKeepAwake: "1", EnvOffload: "1"}, "sched/1 shard/1 thread/offload/steer/wake-early 0 us/join-early 250 us/keep-awake"},
	} {
		for _, k := range []string{EnvEngine, EnvOffload, EnvShards, EnvWakeEarly, EnvKeepAwake, EnvJoinEarly, EnvSteer, EnvStandby} {
			t.Setenv(k, tc.env[k])
		}
		c, err := ConfigFromEnv()
		got := c.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("env %v: got %q, want %q", tc.env, got, tc.want)
		}
	}
}
