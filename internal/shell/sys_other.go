//go:build !amd64 && !arm64

package shell

// On other architectures waiting_for_input is never reported.
func sysKind(nr int64) syscallKind { return sysOther }

// nrPselect6: no prompt is recognised from the process state here.
const nrPselect6 = -1
