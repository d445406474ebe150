package wire

import (
	"errors"
	"fmt"
	"net/http"
)

// LimitBody caps r's body at max bytes before anything reads it: a
// declared Content-Length above max is refused at once (nothing is read),
// and a body of unknown length (chunked) is cut by http.MaxBytesReader,
// whose error TooLarge turns into the same answer. max < 0 is no limit.
// A refused request should be answered with Connection: close, so that
// the server does not read the rest of the body either.
func LimitBody(w http.ResponseWriter, r *http.Request, max int64) error {
	if max < 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength > max {
		return tooLarge(r.ContentLength, max)
	}
	r.Body = http.MaxBytesReader(w, r.Body, max)
	return nil
}

// TooLarge returns the documented too_large error for err when err is the
// error of a body cut by LimitBody, and nil otherwise.
func TooLarge(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(-1, mbe.Limit)
	}
	return nil
}

func tooLarge(size, max int64) error {
	got := "more"
	if size >= 0 {
		got = fmt.Sprintf("%d bytes", size)
	}
	return fmt.Errorf("request body of %s is over this route's limit of %d bytes; send large content through PUT /v1/files (no limit): %w", got, max, ErrTooLarge)
}
