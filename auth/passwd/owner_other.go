//go:build !unix

package passwd

import (
	"io/fs"
	"os"
)

// keepOwner does nothing where files have no Unix owner.
func keepOwner(*os.File, fs.FileInfo) {}

// shareNew keeps a new file its creator's where files have no Unix group.
func shareNew(*os.File, string) fs.FileMode { return 0o600 }
