package health

import (
	"testing"
	"time"
)

func TestReadmitAfterRiseInARow(t *testing.T) {
	var tr Tracker // DefaultRise: 3
	now := time.Now()
	if !tr.MarkDown("r1", "hop 1 unreachable", now) {
		t.Fatal("first MarkDown: want wasUp")
	}
	if tr.MarkDown("r1", "again", now) {
		t.Fatal("second MarkDown: want not wasUp")
	}
	// pass, pass, fail: the count restarts; then three passes re-admit.
	for i, step := range []struct{ ok, readmitted bool }{
		{true, false}, {true, false}, {false, false},
		{true, false}, {true, false}, {true, true},
	} {
		if got := tr.Probed("r1", step.ok); got != step.readmitted {
			t.Fatalf("probe %d (ok %v): readmitted %v", i, step.ok, got)
		}
		if tr.IsDown("r1") == step.readmitted {
			t.Fatalf("probe %d: IsDown %v after readmitted %v", i, tr.IsDown("r1"), step.readmitted)
		}
	}
	if len(tr.Down()) != 0 {
		t.Fatalf("down %v", tr.Down())
	}
	if tr.Probed("r1", true) {
		t.Fatal("a probe of a relay in use re-admitted it")
	}
}

func TestMarkDownAgainRestartsCount(t *testing.T) {
	tr := Tracker{Rise: 2}
	now := time.Now()
	tr.MarkDown("a", "x", now)
	tr.MarkDown("b", "y", now)
	tr.Probed("a", true)
	tr.MarkDown("a", "failed again", now) // a tunnel failed at it meanwhile
	if tr.Probed("a", true) {
		t.Fatal("re-admitted one pass after a new failure")
	}
	d := tr.Down()
	if len(d) != 2 || d[0].Name != "a" || d[0].Passes != 1 || d[0].Reason != "x" || d[1].Name != "b" {
		t.Fatalf("down %+v", d)
	}
	if !tr.Probed("a", true) {
		t.Fatal("not re-admitted after Rise passes")
	}
}
