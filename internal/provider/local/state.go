package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// meta is sandbox.json.
type meta struct {
	Spec      sandbox.Spec `json:"spec"`
	Isolated  bool         `json:"isolated"`
	Pid       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // clock ticks since boot, from /proc/PID/stat
	Workdir   string       `json:"workdir"`
}

func (p *Provider) dir(id string) string { return filepath.Join(p.opts.Root, id) }

// stateDir is where limbsd keeps a sandbox's durable state: sessions and
// output logs, kept across Stop and Start.
func (p *Provider) stateDir(id string) string { return filepath.Join(p.dir(id), "state") }

// socketDir holds limbsd's socket; the sandbox may write in it.
func (p *Provider) socketDir(id string) string { return filepath.Join(p.dir(id), "run") }

func (p *Provider) socket(id string) string { return filepath.Join(p.socketDir(id), "limbsd.sock") }

// prepareDirs creates or checks limbsd's state and socket directories,
// never following a link in their place.
func (p *Provider) prepareDirs(spec sandbox.Spec) error {
	for _, d := range []string{"state", "run"} {
		if err := sandbox.MkdirBeneath(p.dir(spec.ID), d, 0o700); err != nil {
			return fmt.Errorf("local sandbox %s: %w", spec.ID, err)
		}
	}
	return nil
}

func (p *Provider) save(m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(p.dir(m.Spec.ID), "sandbox.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving sandbox %s: %w", m.Spec.ID, err)
	}
	return os.Rename(tmp, path)
}

func (p *Provider) load(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(p.dir(id), "sandbox.json"))
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("local sandbox %s: %w", id, wire.ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("local sandbox %s: sandbox.json: %w", id, err)
	}
	return m, nil
}
