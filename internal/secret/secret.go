// Package secret masks the secret values given to sandboxes (env values
// marked secret at creation) in what the control plane writes: events, log
// lines and answers. A value is replaced by Mask ("***") wherever it
// appears as it is or as JSON escapes it.
//
// It must never keep a value anywhere but in memory, and never print one.
package secret

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"sync"
)

// Mask replaces every secret value.
const Mask = "***"

// MinLen is the shortest value that can be marked secret: masking a
// shorter one would mask common text everywhere.
const MinLen = 4

// Forms returns the byte strings that stand for values: each as it is and
// as JSON escapes it (when that differs), with HTML escaping and without
// (wire.WriteJSON turns it off, encoding/json's Marshal has it on: a
// value with both a `"` or `\` and a `<`, `>` or `&` differs), longest
// first, without duplicates and without values shorter than MinLen.
func Forms(values []string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	add := func(s string) {
		if len(s) >= MinLen && !seen[s] {
			seen[s] = true
			out = append(out, []byte(s))
		}
	}
	for _, v := range values {
		add(v)
		if b, err := json.Marshal(v); err == nil {
			add(string(b[1 : len(b)-1]))
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
			add(string(b[1 : len(b)-1]))
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// MaskBytes returns b with every form replaced by Mask (b itself when
// there is none in it).
func MaskBytes(b []byte, forms [][]byte) []byte {
	for _, f := range forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte(Mask))
		}
	}
	return b
}

// Set is the secret values of every sandbox, safe for concurrent use.
type Set struct {
	mu    sync.RWMutex // guards the fields below
	by    map[string][]string
	forms [][]byte // of every sandbox's values
}

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{by: map[string][]string{}} }

// Put sets sandbox id's values (none: forgets it).
func (s *Set) Put(id string, values []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(values) == 0 {
		delete(s.by, id)
	} else {
		s.by[id] = values
	}
	var all []string
	for _, vs := range s.by {
		all = append(all, vs...)
	}
	s.forms = Forms(all)
}

// Forms returns the forms of every sandbox's values.
func (s *Set) Forms() [][]byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.forms
}

// Empty says whether no value is secret.
func (s *Set) Empty() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.forms) == 0
}

// String masks str.
func (s *Set) String(str string) string {
	forms := s.Forms()
	if len(forms) == 0 {
		return str
	}
	return string(MaskBytes([]byte(str), forms))
}

// Reader masks what r yields. Of each read it holds back only a tail
// that begins a value (until the next read, or the end), so that a value
// cut between two reads is masked too, and a stream (an output follow) is
// not delayed otherwise.
func Reader(r io.Reader, forms [][]byte) io.Reader {
	return &reader{r: r, forms: forms}
}

type reader struct {
	r     io.Reader
	forms [][]byte
	in    []byte // read, not masked yet
	out   []byte // masked, not returned yet
	err   error
}

func (m *reader) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.err != nil {
			if len(m.in) > 0 {
				m.out, m.in = MaskBytes(m.in, m.forms), nil
				continue
			}
			return 0, m.err
		}
		buf := make([]byte, 32<<10)
		n, err := m.r.Read(buf)
		m.in = append(m.in, buf[:n]...)
		m.err = err
		if err != nil || n == 0 {
			continue
		}
		masked := MaskBytes(m.in, m.forms)
		cut := len(masked) - heldTail(masked, m.forms)
		m.out = append(m.out[:0], masked[:cut]...)
		m.in = append([]byte(nil), masked[cut:]...)
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// heldTail is the length of the longest tail of b that is the start (not
// the whole) of a form.
func heldTail(b []byte, forms [][]byte) int {
	best := 0
	for _, f := range forms {
		for k := min(len(f)-1, len(b)); k > best; k-- {
			if bytes.Equal(b[len(b)-k:], f[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// Handler masks the message and every string attribute of each record
// before next handles it (limbs serve's log lines).
func Handler(next slog.Handler, s *Set) slog.Handler { return &handler{next: next, s: s} }

type handler struct {
	next slog.Handler
	s    *Set
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if h.s.Empty() {
		return h.next.Handle(ctx, r)
	}
	nr := slog.NewRecord(r.Time, r.Level, h.s.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(h.mask(a))
		return true
	})
	return h.next.Handle(ctx, nr)
}

func (h *handler) mask(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.String(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.mask(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		// An error or a value with a String method: mask its text.
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.s.String(err.Error()))
		}
		return slog.String(a.Key, h.s.String(v.String()))
	}
	return a
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.mask(a)
	}
	return &handler{next: h.next.WithAttrs(out), s: h.s}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), s: h.s}
}

// MaskLines masks the values that run across the lines of a screen (a
// value printed near the right edge wraps onto the next row, and each
// line then holds only a part of it, which MaskBytes cannot see): every
// occurrence of a form in the lines joined without separators that
// crosses from one line into the next has its bytes replaced with '*',
// in place, so that the screen's layout stays. Values within one line
// are left to MaskBytes.
func MaskLines(lines []string, forms [][]byte) []string {
	if len(lines) < 2 || len(forms) == 0 {
		return lines
	}
	var joined []byte
	ends := make([]int, len(lines)) // offset in joined where each line ends
	for i, l := range lines {
		joined = append(joined, l...)
		ends[i] = len(joined)
	}
	stars := make([]bool, len(joined))
	hit := false
	for _, f := range forms {
		for at := 0; at+len(f) <= len(joined); {
			k := bytes.Index(joined[at:], f)
			if k < 0 {
				break
			}
			s, e := at+k, at+k+len(f)
			for _, end := range ends[:len(ends)-1] {
				if s < end && end < e {
					for x := s; x < e; x++ {
						stars[x] = true
					}
					hit = true
					break
				}
			}
			at = s + 1
		}
	}
	if !hit {
		return lines
	}
	out := make([]string, len(lines))
	start := 0
	for i, end := range ends {
		b := []byte(lines[i])
		for x := start; x < end; x++ {
			if stars[x] {
				b[x-start] = '*'
			}
		}
		out[i] = string(b)
		start = end
	}
	return out
}
