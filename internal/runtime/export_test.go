package runtime

// WindowWaits is how many times s's batched follows waited for their
// window.
func WindowWaits(s *Server) int64 { return s.windowWaits.Load() }
