// Package fileperm explains a file the process may not read: which user
// needs to read it and how to let it, for files an operator makes as root
// and a service reads as its own user.
package fileperm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// Explain returns err, from opening the file at path, with the user this
// process runs as and the commands that let it read the file when err is
// a permission error; any other err is returned as it is.
func Explain(err error, path string) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	who, group := account()
	if group == "" {
		return fmt.Errorf("%w (user %s, which this process runs as, needs to read %s)", err, who, path)
	}
	if dir, blocked := blockingDir(path); blocked {
		return fmt.Errorf("%w (user %s, which this process runs as, cannot enter %s to read %s; "+
			"to let it: chgrp %s %s && chmod g+x %s)", err, who, dir, path, group, dir, dir)
	}
	return fmt.Errorf("%w (user %s, which this process runs as, needs to read %s; "+
		"to let it: chgrp %s %s && chmod 0640 %s)", err, who, path, group, path, path)
}

// account names the process's effective user and group, by number where
// they have no name; group is empty where files have no Unix group.
func account() (who, group string) {
	uid, gid := os.Geteuid(), os.Getegid()
	who = strconv.Itoa(uid)
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	if gid < 0 {
		return who, ""
	}
	group = strconv.Itoa(gid)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return who, group
}

// blockingDir returns the directory this process cannot search on the
// way to path, when the file itself is out of reach: the deepest one it
// can still look at.
func blockingDir(path string) (string, bool) {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrPermission) {
		return "", false
	}
	dir := filepath.Dir(path)
	for {
		_, err := os.Stat(dir)
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrPermission) || parent == dir {
			return dir, true
		}
		dir = parent
	}
}
