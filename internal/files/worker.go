package files

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/wire"
)

// A daemon running as root must not serve the file API with its own
// identity: it would follow the agent's links into /etc/shadow and leave
// root-owned files the agent cannot edit. It runs the Server in a worker
// process with the agent's identity instead, and forwards every files
// request to it.
//
// The worker is the daemon's own binary, re-executed with WorkerEnv set.
// It inherits one end of a SOCK_SEQPACKET socket pair as descriptor 3 and
// nothing else: for each new connection the daemon makes a fresh stream
// socket pair and passes one end over it (SCM_RIGHTS), so no socket file
// exists that another process of the agent could connect to or replace,
// and no token is needed. The agent can kill the worker (same user); the
// next request starts a new one.

// WorkerEnv marks a process started as a files worker; its value is
// unused.
const WorkerEnv = "LIMBSD_FILES_WORKER"

// ServeWorker is the worker's main: it serves opts' Server on the
// connections passed over descriptor 3 until the daemon closes it.
func ServeWorker(opts Options) error {
	ctrl := os.NewFile(3, "files-worker-control")
	if ctrl == nil {
		return errors.New("files worker: no control socket on descriptor 3; the daemon starts workers itself")
	}
	fs, err := New(opts)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fs, ErrorLog: slog.NewLogLogger(fs.log.Handler(), slog.LevelDebug)}
	err = srv.Serve(&fdListener{ctrl: ctrl})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// fdListener accepts the connections the daemon passes over ctrl.
type fdListener struct {
	ctrl *os.File
	once sync.Once
}

func (l *fdListener) Accept() (net.Conn, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(int(l.ctrl.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("files worker: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil, net.ErrClosed // the daemon is gone
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			continue
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			continue
		}
		f := os.NewFile(uintptr(fds[0]), "files-conn")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			continue
		}
		return c, nil
	}
}

func (l *fdListener) Close() error {
	var err error
	l.once.Do(func() { err = l.ctrl.Close() })
	return err
}

func (l *fdListener) Addr() net.Addr { return &net.UnixAddr{Name: "files-worker", Net: "unix"} }

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// Path and Args start the worker (Path is the daemon's own binary).
	Path string
	Args []string
	// Env is the worker's environment; WorkerEnv is added.
	Env []string
	// Credential is the agent's identity.
	Credential *syscall.Credential
	Logger     *slog.Logger
}

// Worker is the daemon's side of a files worker: an http.Handler that
// forwards to it, starting it on first use and again after it died.
type Worker struct {
	opts  WorkerOptions
	log   *slog.Logger
	tr    *http.Transport
	proxy *httputil.ReverseProxy

	mu   sync.Mutex // guards the fields below
	ctrl *os.File   // the daemon's end of the control socket; nil: no worker
	cmd  *exec.Cmd
}

// NewWorker returns a Worker; the process starts on the first request.
func NewWorker(opts WorkerOptions) *Worker {
	w := &Worker{opts: opts, log: opts.Logger}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.tr = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return w.dial() },
		MaxIdleConnsPerHost: 8,
		DisableCompression:  true,
	}
	w.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "files-worker"
			pr.Out.Host = "files-worker"
			pr.Out.Header.Del("Authorization")
		},
		Transport: w.tr,
		ErrorHandler: func(rw http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			w.log.Warn("files worker did not answer", "err", err)
			wire.WriteError(rw, fmt.Errorf("the file API's worker process did not answer (%v); it is started again on the next request: retry: %w", err, wire.ErrUnavailable))
		},
	}
	return w
}

// ServeHTTP forwards a files request to the worker.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.proxy.ServeHTTP(rw, r) }

// Close stops the worker.
func (w *Worker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
	w.tr.CloseIdleConnections()
	return nil
}

// dial passes a new connection to the worker, starting one when there is
// none or the one there was has died.
func (w *Worker) dial() (net.Conn, error) {
	var err error
	for range 2 {
		var ctrl *os.File
		if ctrl, err = w.control(); err != nil {
			return nil, err
		}
		var fds [2]int
		if fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("files worker: socketpair: %w", err)
		}
		err = unix.Sendmsg(int(ctrl.Fd()), []byte{0}, unix.UnixRights(fds[1]), nil, unix.MSG_NOSIGNAL)
		unix.Close(fds[1])
		if err != nil {
			unix.Close(fds[0])
			w.forget(ctrl)
			continue
		}
		f := os.NewFile(uintptr(fds[0]), "files-worker-conn")
		c, ferr := net.FileConn(f)
		f.Close()
		return c, ferr
	}
	return nil, fmt.Errorf("files worker: passing a connection: %w", err)
}

// control returns the live worker's control socket, starting a worker.
func (w *Worker) control() (*os.File, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctrl != nil {
		return w.ctrl, nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("files worker: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "files-worker-control")
	theirs := os.NewFile(uintptr(fds[1]), "files-worker-control")
	defer theirs.Close()
	cmd := exec.Command(w.opts.Path, w.opts.Args...)
	cmd.Env = append(append([]string{}, w.opts.Env...), WorkerEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: w.opts.Credential, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("files worker: starting %s: %w", w.opts.Path, err)
	}
	w.log.Debug("files worker started", "pid", cmd.Process.Pid)
	w.ctrl, w.cmd = mine, cmd
	go func() {
		err := cmd.Wait()
		w.mu.Lock()
		if w.cmd == cmd {
			w.log.Warn("files worker exited; the next request starts another", "err", err)
			w.stopLocked()
		}
		w.mu.Unlock()
		w.tr.CloseIdleConnections()
	}()
	return mine, nil
}

// forget drops a control socket that no longer reaches its worker.
func (w *Worker) forget(ctrl *os.File) {
	w.mu.Lock()
	if w.ctrl == ctrl {
		w.stopLocked()
	}
	w.mu.Unlock()
	w.tr.CloseIdleConnections()
}

func (w *Worker) stopLocked() {
	if w.ctrl != nil {
		w.ctrl.Close()
		w.ctrl = nil
	}
	if w.cmd != nil && w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
	}
	w.cmd = nil
}
