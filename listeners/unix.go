package listeners

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// listenUnix listens on a unix socket at path with mode. A socket file
// left by a broker that did not stop cleanly is removed first; a live
// one (something answers on it) or a file that is not a socket is an
// error, never removed.
func listenUnix(path string, mode fs.FileMode) (net.Listener, error) {
	if mode == 0 {
		mode = DefaultFileMode
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process listens on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
