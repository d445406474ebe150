// Package dashboard is the web dashboard of `limbs serve` at `/`: an
// overview of every sandbox, each sandbox's live terminals, command
// timeline, files, agent trajectory and raw events, and replays of its
// sessions. Its HTML, CSS and JS are plain files embedded here (assets/,
// with xterm.js vendored from npm: scripts/vendor-dashboard.sh); nothing
// is loaded from another origin.
//
// Security model (docs/dashboard.md): a person logs in with the control
// plane's token and gets a session cookie (a random id mapped to the
// session here, never the token; HttpOnly, SameSite=Strict, Secure over
// TLS). The cookie authenticates only requests the dashboard's own pages
// make: same-origin (Sec-Fetch-Site, Origin), a per-session CSRF token in
// a header on every state-changing request, and an Origin equal to the
// server's own on every WebSocket. Such a request reaches the API with the
// token put in its Authorization header, so the API's handlers, its
// masking of secrets and its event log see what a bearer client sends.
// Requests with a bearer token pass through untouched.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

//go:embed assets
var assets embed.FS

// CookieName is the session cookie's name; over TLS it carries the
// __Host- prefix (Secure, Path=/, no Domain: the browser enforces it).
const (
	CookieName    = "limbs_dashboard"
	tlsCookieName = "__Host-limbs_dashboard"
	// CSRFHeader carries the session's CSRF token on every request of
	// the dashboard that changes state.
	CSRFHeader = "X-Limbs-Csrf"
)

// Session bounds.
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 256
	// loginPause slows a wrong token down, so that guessing costs time.
	loginPause = 300 * time.Millisecond
)

// CSP is the Content-Security-Policy of every answer of the dashboard:
// scripts only from this origin's files (no inline script, no eval),
// connections only to this origin (its WebSockets included), no frames.
// style-src allows inline styles because xterm.js sizes its rows with a
// <style> element it writes; no script can be injected through it.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Options configure a Handler.
type Options struct {
	// Plane is the control plane shown.
	Plane *control.Plane
	// Token is the control plane's bearer token: what a login must give,
	// and what a request with a valid cookie carries on to API.
	Token string
	// API serves /v1/... (and everything that is not the dashboard's).
	API    http.Handler
	Logger *slog.Logger
}

// Handler serves the dashboard and hands every other request to the API.
type Handler struct {
	opts    Options
	token   endpoint.Token
	bearer  string
	static  http.Handler
	login   *template.Template
	tracker *tracker
	// secretForms are the sandboxes' secret values, masked in the
	// terminals' output.
	secretForms func() [][]byte

	// login is held by one login's check of the token and, when it is
	// wrong, its pause: guesses sent in parallel wait in turn, so that
	// they cost loginPause each, not loginPause per batch.
	login1 chan struct{}

	mu       sync.Mutex
	sessions map[[32]byte]*session // by the SHA-256 of the cookie's id
}

// pauseWrongLogin is what a wrong token waits (a variable for the tests).
var pauseWrongLogin = func() { time.Sleep(loginPause) }

type session struct {
	csrf    string
	expires time.Time
	// ctx ends when the session does (logout, expiry, eviction): every
	// request the cookie authenticated (an event stream, a terminal's
	// WebSocket) ends with it, not only the requests that come after.
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns the dashboard in front of opts.API. Close stops its
// follower of the event log.
func New(opts Options) (*Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	tpl, err := template.ParseFS(assets, "assets/login.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{
		opts:     opts,
		token:    endpoint.NewToken(opts.Token),
		bearer:   "Bearer " + opts.Token,
		static:   http.StripPrefix("/assets/", http.FileServerFS(sub)),
		login:    tpl,
		sessions: map[[32]byte]*session{},
		login1:   make(chan struct{}, 1),
	}
	h.secretForms = func() [][]byte { return nil }
	if opts.Plane != nil {
		h.tracker = newTracker(opts.Plane, opts.Logger)
		h.secretForms = opts.Plane.Secrets().Forms
	}
	return h, nil
}

// Close stops the dashboard's background work.
func (h *Handler) Close() {
	if h.tracker != nil {
		h.tracker.close()
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html":
		h.secure(w)
		h.serveApp(w, r)
	case p == "/login":
		h.secure(w)
		h.serveLogin(w, r)
	case p == "/logout":
		h.secure(w)
		h.serveLogout(w, r)
	case strings.HasPrefix(p, "/assets/"):
		h.secure(w)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "assets take GET", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		h.static.ServeHTTP(w, r)
	case strings.HasPrefix(p, "/ui/"):
		h.secure(w)
		w.Header().Set("Cache-Control", "no-store")
		s, ok := h.cookieAuth(w, r)
		if !ok {
			return
		}
		h.serveUI(w, r, s)
	case r.Header.Get("Authorization") == "" && h.hasCookie(r) && strings.HasPrefix(p, "/v1/"):
		// A request of the dashboard's pages to the API.
		s, ok := h.cookieAuth(w, r)
		if !ok {
			return
		}
		// The API's answers to a browser are not kept in its cache, nor
		// sniffed into HTML or script.
		h.secure(w)
		w.Header().Set("Cache-Control", "no-store")
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(s.ctx, cancel)()
		r = r.WithContext(ctx)
		if isWebSocket(r) {
			// The one WebSocket of the pages, relayed here: a proxied
			// upgrade would hand limbsd's headers to the browser.
			id, sid, ok := attachRoute(p)
			if !ok || h.opts.Plane == nil {
				h.forbid(w, r, fmt.Errorf("the dashboard's session opens no WebSocket but a terminal's (/v1/sandboxes/ID/sessions/SID/attach)"))
				return
			}
			h.serveAttach(w, r, id, sid) // attach.go: its output masked
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del("Cookie")
		r.Header.Set("Authorization", h.bearer)
		h.opts.API.ServeHTTP(&apiAnswer{ResponseWriter: w, h: h}, r) // apianswer.go
	default:
		// Bearer clients, and anything else: the API as it always was. A
		// cookie never reaches it (nor limbsd behind it).
		if r.Header.Get("Cookie") != "" {
			r = r.Clone(r.Context())
			r.Header.Del("Cookie")
		}
		h.opts.API.ServeHTTP(w, r)
	}
}

// secure sets the headers of every dashboard answer.
func (h *Handler) secure(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
}

func cookieName(r *http.Request) string {
	if r.TLS != nil {
		return tlsCookieName
	}
	return CookieName
}

func (h *Handler) hasCookie(r *http.Request) bool {
	_, err := r.Cookie(cookieName(r))
	return err == nil
}

// ownOrigin is the origin the request was sent to.
func ownOrigin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// sameOrigin says whether r comes from a page of this origin (or from
// the address bar, for a navigation): Sec-Fetch-Site when the browser
// sends it, and Origin when present. unsafe requests (and WebSockets)
// must name their Origin.
func sameOrigin(r *http.Request, mustHaveOrigin bool) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin":
	case "none":
		if mustHaveOrigin {
			return fmt.Errorf("a request typed in the address bar cannot change anything")
		}
	default:
		return fmt.Errorf("a %s request (Sec-Fetch-Site) cannot use the dashboard's session", site)
	}
	o := r.Header.Get("Origin")
	if o == "" {
		if mustHaveOrigin {
			return fmt.Errorf("the request names no Origin")
		}
		return nil
	}
	if o != ownOrigin(r) {
		return fmt.Errorf("the request's Origin %q is not this dashboard's (%s)", o, ownOrigin(r))
	}
	return nil
}

// unsafe says whether r may change state.
func unsafe(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// cookieAuth checks r's session cookie and where r comes from; it answers
// r itself (401, 403) and returns false when r may not go on.
func (h *Handler) cookieAuth(w http.ResponseWriter, r *http.Request) (*session, bool) {
	s := h.lookup(r)
	if s == nil {
		w.Header().Set("Connection", "close")
		wire.WriteError(w, fmt.Errorf("not logged in to the dashboard, or the session expired: log in again at /login: %w", wire.ErrUnauthorized))
		return nil, false
	}
	ws := isWebSocket(r)
	if err := sameOrigin(r, ws || unsafe(r)); err != nil {
		h.forbid(w, r, err)
		return nil, false
	}
	if unsafe(r) {
		got := r.Header.Get(CSRFHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
			h.forbid(w, r, fmt.Errorf("missing or wrong %s header (the dashboard's pages send it)", CSRFHeader))
			return nil, false
		}
	}
	return s, true
}

func (h *Handler) forbid(w http.ResponseWriter, r *http.Request, err error) {
	h.opts.Logger.Warn("dashboard: refused a request", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "err", err)
	wire.WriteJSON(w, http.StatusForbidden, wire.Error{Error: wire.ErrorBody{
		Code:    "forbidden",
		Message: "refused: " + err.Error() + "; use the dashboard from its own pages, or the API with a bearer token",
	}})
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (h *Handler) lookup(r *http.Request) *session {
	c, err := r.Cookie(cookieName(r))
	if err != nil || c.Value == "" {
		return nil
	}
	key := sha256.Sum256([]byte(c.Value))
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[key]
	if s == nil {
		return nil
	}
	if time.Now().After(s.expires) || s.ctx.Err() != nil {
		delete(h.sessions, key)
		s.cancel()
		return nil
	}
	return s
}

// newSession records a session and returns its cookie value.
func (h *Handler) newSession() (string, *session) {
	id := randomString(32)
	s := &session{csrf: randomString(32), expires: time.Now().Add(sessionTTL)}
	s.ctx, s.cancel = context.WithDeadline(context.Background(), s.expires)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for k, old := range h.sessions {
		if now.After(old.expires) {
			delete(h.sessions, k)
			old.cancel()
		}
	}
	for len(h.sessions) >= maxSessions { // the oldest go first
		var oldest [32]byte
		var at time.Time
		for k, old := range h.sessions {
			if at.IsZero() || old.expires.Before(at) {
				oldest, at = k, old.expires
			}
		}
		h.sessions[oldest].cancel()
		delete(h.sessions, oldest)
	}
	h.sessions[sha256.Sum256([]byte(id))] = s
	return id, s
}

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName(r),
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

func (h *Handler) serveApp(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "the dashboard takes GET", http.StatusMethodNotAllowed)
		return
	}
	if h.lookup(r) == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	b, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

type loginPage struct {
	Error string
}

func (h *Handler) serveLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.renderLogin(w, http.StatusOK, "")
	case http.MethodPost:
		if err := sameOrigin(r, true); err != nil {
			h.forbid(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		if err := r.ParseForm(); err != nil {
			h.renderLogin(w, http.StatusBadRequest, "The form could not be read; try again.")
			return
		}
		tok := strings.TrimSpace(r.PostForm.Get("token"))
		select {
		case h.login1 <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		ok := tok != "" && h.token.Equal(tok)
		if !ok {
			pauseWrongLogin()
		}
		<-h.login1
		if !ok {
			h.opts.Logger.Warn("dashboard: a login with a wrong token", "remote", r.RemoteAddr)
			h.renderLogin(w, http.StatusUnauthorized, "Wrong token. Use the token `limbs serve` printed or wrote to its state dir (STATE_DIR/token).")
			return
		}
		id, _ := h.newSession()
		h.setCookie(w, r, id, int(sessionTTL/time.Second))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	default:
		http.Error(w, "login takes GET or POST", http.StatusMethodNotAllowed)
	}
}

func (h *Handler) renderLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = h.login.Execute(w, loginPage{Error: msg})
}

func (h *Handler) serveLogout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "logout takes POST", http.StatusMethodNotAllowed)
		return
	}
	if _, ok := h.cookieAuth(w, r); !ok {
		return
	}
	c, _ := r.Cookie(cookieName(r))
	key := sha256.Sum256([]byte(c.Value))
	h.mu.Lock()
	if s := h.sessions[key]; s != nil {
		s.cancel() // its open streams and terminals end now
	}
	delete(h.sessions, key)
	h.mu.Unlock()
	h.setCookie(w, r, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

// serveUI answers the dashboard's own calls (/ui/...), each already
// checked by cookieAuth.
func (h *Handler) serveUI(w http.ResponseWriter, r *http.Request, s *session) {
	rest := strings.TrimPrefix(r.URL.Path, "/ui/")
	if r.Method != http.MethodGet {
		wire.WriteError(w, fmt.Errorf("%s takes GET: %w", r.URL.Path, wire.ErrBadRequest))
		return
	}
	switch {
	case rest == "session":
		wire.WriteJSON(w, http.StatusOK, map[string]any{"csrf": s.csrf, "expires": s.expires, "version": wire.Version})
	case rest == "overview":
		h.serveOverview(w, r)
	case strings.HasPrefix(rest, "sandboxes/"):
		id, what, _ := strings.Cut(strings.TrimPrefix(rest, "sandboxes/"), "/")
		switch what {
		case "cast":
			h.serveCast(w, r, id)
		case "atif":
			h.serveATIF(w, r, id)
		default:
			wire.WriteError(w, fmt.Errorf("no dashboard route %s: %w", r.URL.Path, wire.ErrNotFound))
		}
	default:
		wire.WriteError(w, fmt.Errorf("no dashboard route %s: %w", r.URL.Path, wire.ErrNotFound))
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
