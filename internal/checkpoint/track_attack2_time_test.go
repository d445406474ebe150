package checkpoint

import "time"

func testingNow() time.Time                  { return time.Now() }
func testingSince(t time.Time) time.Duration { return time.Since(t) }
