package dashboard

// SetPauseWrongLogin replaces the pause of a wrong login until the
// returned func restores it.
func SetPauseWrongLogin(f func()) (restore func()) {
	old := pauseWrongLogin
	pauseWrongLogin = f
	return func() { pauseWrongLogin = old }
}
