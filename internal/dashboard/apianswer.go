package dashboard

import "net/http"

// APICSP is the Content-Security-Policy of the API's answers to the
// dashboard's cookie: they are data the pages fetch, never a page. A
// sandbox's limbsd writes many of them (a file, a command's output, with
// whatever Content-Type it likes), so if a person opens one in a tab it
// renders in a sandbox: an opaque origin, no script, no session.
const APICSP = "default-src 'none'; sandbox; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// apiAnswer writes the API's answer to a request the session cookie
// authenticated. The headers the API (and limbsd behind it) chose are
// kept but for those that would act on the dashboard's origin: a
// Set-Cookie (which could replace the session's cookie), Clear-Site-Data,
// and the caching and content rules, which the dashboard sets itself.
// (No upgrade reaches it: the cookie's only WebSocket is a terminal's,
// which attach.go relays.)
type apiAnswer struct {
	http.ResponseWriter
	h     *Handler
	wrote bool
}

func (a *apiAnswer) clean() {
	hd := a.ResponseWriter.Header()
	hd.Del("Set-Cookie")
	hd.Del("Clear-Site-Data")
	hd.Del("Refresh")
	hd.Del("Content-Security-Policy")
	hd.Del("Content-Security-Policy-Report-Only")
	a.h.secure(a.ResponseWriter)
	hd.Set("Content-Security-Policy", APICSP)
	hd.Set("Cache-Control", "no-store")
}

func (a *apiAnswer) WriteHeader(code int) {
	a.clean()
	if code >= 200 {
		a.wrote = true
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *apiAnswer) Write(b []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	return a.ResponseWriter.Write(b)
}

func (a *apiAnswer) Flush() {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

func (a *apiAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }
