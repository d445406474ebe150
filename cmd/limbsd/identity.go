package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/shell"
)

// agentIdentity resolves --user (uid[:gid] or a name from the image's
// /etc/passwd) to the identity the shells and the files worker run as. It
// returns nil when there is nothing to switch to: no --user, or the user
// is limbsd's own (the local provider, a test, or a sandbox whose agent is
// root).
func agentIdentity(spec string) (*shell.Identity, error) {
	if spec == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	var u *user.User
	uid, err := strconv.Atoi(name)
	if err == nil {
		u, _ = user.LookupId(name)
	} else {
		if u, err = user.Lookup(name); err != nil {
			return nil, fmt.Errorf("--user %q: %v; pass a numeric uid:gid or a user in /etc/passwd", spec, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
	}
	if uid < 0 {
		return nil, fmt.Errorf("--user %q: a uid is not negative", spec)
	}
	id := &shell.Identity{UID: uid, GID: uid, Home: "/"}
	if u != nil {
		id.GID, _ = strconv.Atoi(u.Gid)
		if u.HomeDir != "" {
			id.Home = u.HomeDir
		}
	}
	if hasGroup {
		gid, err := strconv.Atoi(group)
		if err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return nil, fmt.Errorf("--user %q: group %q: %v; pass a numeric gid", spec, group, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
		id.GID = gid
	}
	// Supplementary groups as a login would set them (docker run --user
	// does the same with the image's /etc/group).
	if u != nil {
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				if n, err := strconv.Atoi(g); err == nil && n != id.GID {
					id.Groups = append(id.Groups, n)
				}
			}
		}
	}
	if uid == 0 && os.Geteuid() == 0 {
		// A root agent is limbsd's own user, without limbsd's
		// capabilities.
		if err := rootAgent(id); err != nil {
			return id, err
		}
		return nil, nil
	}
	if uid == os.Geteuid() && id.GID == os.Getegid() {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("--user %q: limbsd runs as uid %d and cannot start shells as another user; run it as root (with CAP_SETUID, CAP_SETGID) or leave --user out", spec, os.Geteuid())
	}
	return id, nil
}
