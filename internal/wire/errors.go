package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Sentinel errors. Packages wrap them with %w and the identifiers that
// matter; StatusOf maps them to the wire code and HTTP status in exactly one
// place.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnauthorized = errors.New("unauthorized")
	ErrNotFound     = errors.New("not found")
	ErrBusy         = errors.New("session busy")
	ErrConflict     = errors.New("conflict")
	ErrNoCommand    = errors.New("no command is running")
	ErrTooLarge     = errors.New("too large")
	ErrUnavailable  = errors.New("unavailable")
	// ErrTooMany is a limit on how many of something may exist (sandboxes
	// of a control plane) reached: remove some or raise the limit.
	ErrTooMany = errors.New("too many")
	// ErrGone: bytes that existed are no longer kept (cut by a disk
	// bound, or lost when a write failed). Wrap a *GoneError to name them.
	ErrGone = errors.New("gone")
)

// GoneError names the bytes [From, To) of an output stream that are no
// longer kept. It wraps ErrGone; WriteError puts the range in the error
// body as "missing".
type GoneError struct {
	From, To int64
	Msg      string
}

func (e *GoneError) Error() string { return e.Msg }
func (e *GoneError) Unwrap() error { return ErrGone }

// Error is the body of every error response.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the inside of Error.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Missing is an extension of code "gone": the byte range [from, to)
	// that is no longer kept.
	Missing []int64 `json:"missing,omitempty"`
}

// StatusOf maps an error to its HTTP status and wire code. Anything not
// wrapping a sentinel is internal.
func StatusOf(err error) (status int, code string) {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "unauthorized"
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, ErrBusy):
		return http.StatusConflict, "session_busy"
	case errors.Is(err, ErrNoCommand):
		return http.StatusConflict, "no_command"
	case errors.Is(err, ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, ErrTooMany):
		return http.StatusTooManyRequests, "too_many"
	case errors.Is(err, ErrGone):
		return http.StatusGone, "gone"
	default:
		return http.StatusInternalServerError, "internal"
	}
}

// WriteError writes err as the documented error body.
func WriteError(w http.ResponseWriter, err error) {
	status, code := StatusOf(err)
	body := ErrorBody{Code: code, Message: err.Error()}
	if g, ok := errors.AsType[*GoneError](err); ok {
		body.Missing = []int64{g.From, g.To}
	}
	WriteJSON(w, status, Error{Error: body})
}

// WriteJSON writes v with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// DecodeJSON decodes a request body strictly: unknown fields and trailing
// data are bad requests. An empty body decodes as the zero value when
// allowEmpty is set.
func DecodeJSON(r *http.Request, v any, allowEmpty bool) error {
	const max = 64 << 20
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if allowEmpty && errors.Is(err, io.EOF) {
			return nil
		}
		if tl := TooLarge(err); tl != nil {
			return tl
		}
		return fmt.Errorf("invalid JSON body: %v; check the request against docs/api.md: %w", err, ErrBadRequest)
	}
	if dec.More() {
		return fmt.Errorf("invalid JSON body: trailing data after the object: %w", ErrBadRequest)
	}
	return nil
}

// ErrorFromBody turns an error response into a Go error wrapping the
// sentinel matching its code, so that clients can use errors.Is.
func ErrorFromBody(status int, body []byte) error {
	var e Error
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		msg := string(body)
		if len(msg) > 500 {
			msg = msg[:500]
		}
		return fmt.Errorf("HTTP %d: %s", status, msg)
	}
	var base error
	switch e.Error.Code {
	case "bad_request":
		base = ErrBadRequest
	case "unauthorized":
		base = ErrUnauthorized
	case "not_found":
		base = ErrNotFound
	case "session_busy":
		base = ErrBusy
	case "no_command":
		base = ErrNoCommand
	case "conflict":
		base = ErrConflict
	case "too_large":
		base = ErrTooLarge
	case "unavailable":
		base = ErrUnavailable
	case "too_many":
		base = ErrTooMany
	case "gone":
		base = ErrGone
	default:
		return fmt.Errorf("%s (%s)", e.Error.Message, e.Error.Code)
	}
	return &RemoteError{Code: e.Error.Code, Message: e.Error.Message, Missing: e.Error.Missing, base: base}
}

// RemoteError is an error returned by a limbs server.
type RemoteError struct {
	Code    string
	Message string
	// Missing is the byte range of a "gone" error.
	Missing []int64
	base    error
}

func (e *RemoteError) Error() string { return e.Message }
func (e *RemoteError) Unwrap() error { return e.base }
