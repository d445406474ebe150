package eventlog

import "github.com/limbs-dev/limbs/internal/wire"

// eventRing holds the recent events of every sandbox, oldest first, in a
// circular buffer: an event goes in and the oldest go out without the
// copy of the whole window that a sliding slice makes each time it
// reaches its capacity. The buffer grows to the most events the window
// held and shrinks when a quarter of it is in use.
type eventRing struct {
	buf   []wire.Event
	head  int // index in buf of the oldest event
	n     int // events held
	bytes int // their evSize
}

func (r *eventRing) len() int { return r.n }

// at returns the i-th oldest event held.
func (r *eventRing) at(i int) *wire.Event {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

func (r *eventRing) push(ev wire.Event) {
	if r.n == len(r.buf) {
		r.resize(max(64, 2*len(r.buf)))
	}
	j := r.head + r.n
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	r.buf[j] = ev
	r.n++
	r.bytes += evSize(ev)
}

// dropOldest lets the oldest event go.
func (r *eventRing) dropOldest() {
	r.bytes -= evSize(r.buf[r.head])
	r.buf[r.head] = wire.Event{} // its data is garbage now
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	if len(r.buf) > 1024 && r.n < len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
}

// resize moves the events held into a buffer of size c (c >= r.n).
func (r *eventRing) resize(c int) {
	nb := make([]wire.Event, c)
	if r.n > 0 {
		k := copy(nb, r.buf[r.head:min(len(r.buf), r.head+r.n)])
		copy(nb[k:], r.buf[:r.n-k])
	}
	r.buf, r.head = nb, 0
}
