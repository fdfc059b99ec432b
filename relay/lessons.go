package relay

import (
	"net"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// LessonEvery is how often a live tunnel teaches what its sockets sent
// since its last lesson: the bytes sent and sent again (learnLoss), and
// the rate sustained (learnt.Rates.Teach). Without lessons a tunnel taught
// only when it ended, so a download that ran for an hour left every plan
// made meanwhile without the loss and the rate it met. The windows its
// peers advertised are taught when it ends (learnWindows): a window
// counts once a socket sent 4 MiB in all, not in one lesson.
const LessonEvery = 10 * time.Second

// lessons are a tunnel's lessons: a timer, and what its sockets had sent
// as of the last one, which the next (and the tunnel's end) subtract.
type lessons struct {
	mu                 sync.Mutex
	timer              *time.Timer
	over               bool
	taughtC, taughtU   sentMark
	taughtCL, taughtUL []sentMark // a striped stream's links
}

// sentMark is what a socket had sent and sent again at a reading; ok
// false before one.
type sentMark struct {
	sentBytes, resentBytes uint64
	ok                     bool
}

// startLessons has t teach every LessonEvery until it ends.
func (t *tunnelRun) startLessons() {
	t.lessons.timer = time.AfterFunc(LessonEvery, t.lesson)
}

// lesson teaches what t's sockets sent since the last lesson, and arms the
// next.
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
	t.lessons.timer.Reset(LessonEvery)
}

// lastLesson stops the lessons and teaches what the tunnel's last readings
// (res) add to them.
func (t *tunnelRun) lastLesson(res tunnel.Result) {
	t.lessons.mu.Lock()
	defer t.lessons.mu.Unlock()
	t.lessons.over = true
	if t.lessons.timer != nil {
		t.lessons.timer.Stop()
	}
	t.teachLocked(res.A, res.ALinks, res.B, res.BLinks)
}

// teachLocked teaches what the readings c (cl: a striped stream's links)
// of the client side and u (ul) of the upstream side add to the last
// lesson that counted. t.lessons.mu is held.
func (t *tunnelRun) teachLocked(c tunnel.SocketStats, cl []tunnel.SocketStats, u tunnel.SocketStats, ul []tunnel.SocketStats) {
	l := &t.lessons
	t.teachSide(t.client, c, cl, &l.taughtC, &l.taughtCL)
	t.teachSide(t.up, u, ul, &l.taughtU, &l.taughtUL)
}

// teachSide teaches what conn's reading st (links: a striped stream's)
// adds to mark (marks), and moves the marks to it when that counted
// (learnLoss): what a lesson too small to count sent is taught with the
// next, so a slow tunnel teaches what it sent in all, as when it taught
// only at its end.
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
	*marks = (*marks)[:0]
	for _, l := range links {
		*marks = append(*marks, markOf(l))
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
