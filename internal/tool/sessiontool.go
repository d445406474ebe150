package tool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// ScreenInput is the input of shell_screen.
type ScreenInput struct {
	Session string `json:"session,omitempty"`
}

// ScreenOutput is the structured result of shell_screen.
type ScreenOutput struct {
	Session string `json:"session"`
	wire.Screen
}

// SessionInput is the input of the session tool.
type SessionInput struct {
	Action string `json:"action"` // create, list, restart, close
	Name   string `json:"name,omitempty"`
}

// SessionOutput is the structured result of the session tool.
type SessionOutput struct {
	Action   string         `json:"action"`
	Sessions []wire.Session `json:"sessions,omitempty"`
	// Default is the id of the default session ("" before its first use).
	Default string `json:"default,omitempty"`
}

// ScreenTool describes shell_screen.
func (sh *Shell) ScreenTool() Tool[ScreenInput, ScreenOutput] {
	return Tool[ScreenInput, ScreenOutput]{Name: "shell_screen", Description: screenDescription, InputSchema: []byte(shellScreenSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in ScreenInput) (Result[ScreenOutput], error) {
			return sh.ScreenOf(ctx, in)
		}}
}

// SessionTool describes the session tool.
func (sh *Shell) SessionTool() Tool[SessionInput, SessionOutput] {
	return Tool[SessionInput, SessionOutput]{Name: "session", Description: sessionDescription, InputSchema: []byte(sessionSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in SessionInput) (Result[SessionOutput], error) {
			return sh.Session(ctx, in)
		}}
}

// ScreenOf carries out one shell_screen call.
func (sh *Shell) ScreenOf(ctx context.Context, in ScreenInput) (Result[ScreenOutput], error) {
	sid, err := sh.session(ctx, in.Session)
	if err != nil {
		return Result[ScreenOutput]{}, err
	}
	s, err := sh.s.Screen(ctx, sid)
	if err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			return refusal[ScreenOutput](fmt.Sprintf("There is no session %q. session action=list shows the sessions.", in.Session)), nil
		}
		return Result[ScreenOutput]{}, err
	}
	var b strings.Builder
	b.WriteString(withNL(screenText(&s)))
	fmt.Fprintf(&b, "[screen of session %s: %dx%d, cursor at row %d, column %d (from 0)", sid, s.Cols, s.Rows, s.Cursor.Row, s.Cursor.Col)
	if s.AltScreen {
		b.WriteString("; a full-screen program shows the alternate screen")
	}
	if s.Title != "" {
		fmt.Fprintf(&b, "; title %q", s.Title)
	}
	b.WriteString("]\n")
	return Result[ScreenOutput]{Text: b.String(), Out: ScreenOutput{Session: sid, Screen: s}}, nil
}

// Session carries out one call of the session tool.
func (sh *Shell) Session(ctx context.Context, in SessionInput) (Result[SessionOutput], error) {
	out := SessionOutput{Action: in.Action}
	switch in.Action {
	case "create":
		req := sh.opts.Session
		req.Name = in.Name
		s, err := sh.s.CreateSession(ctx, req)
		if errors.Is(err, wire.ErrConflict) {
			return refusal[SessionOutput](fmt.Sprintf("A session named %q exists already: use it with session=%q, or pick another name.", in.Name, in.Name)), nil
		}
		if errors.Is(err, wire.ErrBadRequest) {
			return refusal[SessionOutput]("Cannot create the session: " + detail(err) + "."), nil
		}
		if err != nil {
			return Result[SessionOutput]{}, err
		}
		out.Sessions = []wire.Session{s}
		return Result[SessionOutput]{Text: fmt.Sprintf("[created session %s (id %s) in %s; pass session=%q to shell_run, shell_input, shell_wait and shell_screen to use it]\n", s.Name, s.ID, s.Cwd, s.Name), Out: out}, nil
	case "list":
		l, err := sh.s.ListSessions(ctx)
		if err != nil {
			return Result[SessionOutput]{}, err
		}
		sh.mu.Lock()
		def := sh.def
		busy := make(map[string]string, len(sh.busy))
		for k, v := range sh.busy {
			busy[k] = v
		}
		sh.mu.Unlock()
		out.Sessions, out.Default = l, def
		var b strings.Builder
		for _, s := range l {
			fmt.Fprintf(&b, "%s", s.Name)
			if s.ID != s.Name {
				fmt.Fprintf(&b, " (id %s)", s.ID)
			}
			if s.ID == def {
				b.WriteString(" [default]")
			}
			fmt.Fprintf(&b, ": %s, cwd %s", s.State, s.Cwd)
			if c := busy[s.ID]; c != "" && s.State == wire.StateRunning {
				fmt.Fprintf(&b, ", running command %s", c)
			}
			if s.Restarts > 0 {
				fmt.Fprintf(&b, ", shell restarted %d time(s)", s.Restarts)
			}
			b.WriteByte('\n')
		}
		if len(l) == 0 {
			b.WriteString("[no sessions yet: the first shell_run creates the default one]\n")
		}
		if def == "" && len(l) > 0 {
			b.WriteString("[no default session yet: the first shell_run without session creates it]\n")
		}
		return Result[SessionOutput]{Text: b.String(), Out: out}, nil
	case "restart", "close":
		sid, err := sh.session(ctx, in.Name)
		if err != nil {
			return Result[SessionOutput]{}, err
		}
		if in.Action == "restart" {
			s, err := sh.s.Restart(ctx, sid)
			if err == nil {
				sh.mu.Lock()
				delete(sh.busy, sid)
				sh.mu.Unlock()
				out.Sessions = []wire.Session{s}
				return Result[SessionOutput]{Text: fmt.Sprintf("[restarted session %s: a fresh shell in %s with the old exported environment; its jobs, unexported variables, functions and aliases are gone]\n", s.Name, s.Cwd), Out: out}, nil
			}
			return sh.sessionErr(in.Name, err)
		}
		if err := sh.s.DeleteSession(ctx, sid); err != nil {
			return sh.sessionErr(in.Name, err)
		}
		sh.mu.Lock()
		wasDef := sh.def == sid
		sh.mu.Unlock()
		sh.forget(sid)
		text := fmt.Sprintf("[closed session %s: its shell and every process it started were killed]\n", sid)
		if wasDef {
			text = fmt.Sprintf("[closed the default session %s: its shell and every process it started were killed; the next call without session starts a new one]\n", sid)
		}
		return Result[SessionOutput]{Text: text, Out: out}, nil
	}
	return refusal[SessionOutput](fmt.Sprintf("Unknown action %q: use create, list, restart or close.", in.Action)), nil
}

func (sh *Shell) sessionErr(name string, err error) (Result[SessionOutput], error) {
	if errors.Is(err, wire.ErrNotFound) {
		return refusal[SessionOutput](fmt.Sprintf("There is no session %q. session action=list shows the sessions.", name)), nil
	}
	return Result[SessionOutput]{}, err
}
