package relay

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// LessonEvery is how often the live tunnels teach what their sockets sent
// since their last lesson: the bytes sent and sent again (learnLoss), and
// the rate sustained (learnt.Rates.Teach). Without lessons a tunnel taught
// only when it ended, so a download that ran for an hour left every plan
// made meanwhile without the loss and the rate it met. The windows its
// peers advertised are taught when it ends (learnWindows): a window
// counts once a socket sent 4 MiB in all, not in one lesson.
const LessonEvery = 10 * time.Second

// lessonBook is the server's live tunnels, which runLessons walks every
// LessonEvery: one walker for all, not a timer each, for a tunnel's
// memory (bench/results/load.md).
type lessonBook struct {
	mu   sync.Mutex
	live map[*tunnelRun]struct{}
}

// lessons are a tunnel's: what its sockets had sent as of the last lesson
// that counted, which the next (and the tunnel's end) subtract.
type lessons struct {
	mu               sync.Mutex
	over             bool
	taughtC, taughtU sentMark
	striped          *stripedMarks // a striped stream's links; nil before one
}

// stripedMarks are sentMarks link by link, for each side.
type stripedMarks struct{ c, u []sentMark }

// sentMark is what a socket had sent and sent again at a reading; ok
// false before one.
type sentMark struct {
	sentBytes, resentBytes uint64
	ok                     bool
}

// startLessons enters t in the walker's book.
func (t *tunnelRun) startLessons() {
	b := &t.s.lessonBook
	b.mu.Lock()
	if b.live == nil {
		b.live = map[*tunnelRun]struct{}{}
	}
	b.live[t] = struct{}{}
	b.mu.Unlock()
}

// runLessons teaches, every LessonEvery until ctx ends, what each live
// tunnel's sockets sent since its last lesson.
func (s *Server) runLessons(ctx context.Context) {
	tick := time.NewTicker(LessonEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.lessonBook.mu.Lock()
		live := make([]*tunnelRun, 0, len(s.lessonBook.live))
		for t := range s.lessonBook.live {
			live = append(live, t)
		}
		s.lessonBook.mu.Unlock()
		for _, t := range live {
			t.lesson()
		}
	}
}

// lesson teaches what t's sockets sent since the last lesson.
func (t *tunnelRun) lesson() {
	t.lessons.mu.Lock()
	defer t.lessons.mu.Unlock()
	if t.lessons.over {
		return
	}
	now := time.Now()
	t.s.learnt.Rates.Teach(t.wc, now)
	t.s.learnt.Rates.Teach(t.wu, now)
	c, cl := tunnel.StatsOf(t.client)
	u, ul := tunnel.StatsOf(t.up)
	t.teachLocked(c, cl, u, ul)
}

// lastLesson takes t out of the book and teaches what the tunnel's last
// readings (res) add to its lessons.
func (t *tunnelRun) lastLesson(res tunnel.Result) {
	b := &t.s.lessonBook
	b.mu.Lock()
	delete(b.live, t)
	b.mu.Unlock()
	t.lessons.mu.Lock()
	defer t.lessons.mu.Unlock()
	t.lessons.over = true
	t.teachLocked(res.A, res.ALinks, res.B, res.BLinks)
}

// teachLocked teaches what the readings c (cl: a striped stream's links)
// of the client side and u (ul) of the upstream side add to the last
// lesson that counted. t.lessons.mu is held.
func (t *tunnelRun) teachLocked(c tunnel.SocketStats, cl []tunnel.SocketStats, u tunnel.SocketStats, ul []tunnel.SocketStats) {
	l := &t.lessons
	if (cl != nil || ul != nil) && l.striped == nil {
		l.striped = &stripedMarks{}
	}
	var cm, um *[]sentMark
	if l.striped != nil {
		cm, um = &l.striped.c, &l.striped.u
	}
	t.teachSide(t.client, c, cl, &l.taughtC, cm)
	t.teachSide(t.up, u, ul, &l.taughtU, um)
}

// teachSide teaches what conn's reading st (links: a striped stream's)
// adds to mark (marks, link by link), and moves the marks to it when that
// counted (learnLoss): what a lesson too small to count sent is taught
// with the next, so a slow tunnel teaches what it sent in all, as when it
// taught only at its end.
func (t *tunnelRun) teachSide(conn net.Conn, st tunnel.SocketStats, links []tunnel.SocketStats, mark *sentMark, marks *[]sentMark) {
	var linksSince []tunnel.SocketStats
	if links != nil {
		linksSince = make([]tunnel.SocketStats, len(links))
		for i := range links {
			var m sentMark
			if i < len(*marks) {
				m = (*marks)[i]
			}
			linksSince[i] = m.since(links[i])
		}
	}
	if !t.s.learnLoss(conn, mark.since(st), linksSince) {
		return
	}
	*mark = markOf(st)
	if links != nil {
		*marks = (*marks)[:0]
		for _, l := range links {
			*marks = append(*marks, markOf(l))
		}
	}
}

// markOf is what st says was sent and sent again.
func markOf(st tunnel.SocketStats) sentMark {
	return sentMark{sentBytes: st.SentBytes, resentBytes: st.RetransmittedBytes, ok: st.Valid}
}

// since is the reading now with what m says was sent and sent again
// subtracted (nothing when m is no reading, or a counter went back).
func (m sentMark) since(now tunnel.SocketStats) tunnel.SocketStats {
	if m.ok && now.SentBytes >= m.sentBytes && now.RetransmittedBytes >= m.resentBytes {
		now.SentBytes -= m.sentBytes
		now.RetransmittedBytes -= m.resentBytes
	}
	return now
}
