package demo_test

import (
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// roFS is the OS filesystem, except that every path containing one of
// the fragments behaves like a read-only mount: creating, opening for
// writing, renaming or removing fails with EROFS.
type roFS struct {
	vfs.FS
	fragments []string
}

func (f roFS) bad(name string) bool {
	for _, s := range f.fragments {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

func erofs(op, name string) error { return &os.PathError{Op: op, Path: name, Err: syscall.EROFS} }

func (f roFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.bad(name) {
		return nil, erofs("create", name)
	}
	return f.FS.Create(name, c)
}

func (f roFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if f.bad(name) {
		return nil, erofs("open", name)
	}
	return f.FS.OpenReadWrite(name, c, opts...)
}

func (f roFS) MkdirAll(dir string, perm os.FileMode) error {
	if f.bad(dir) {
		return erofs("mkdir", dir)
	}
	return f.FS.MkdirAll(dir, perm)
}

func (f roFS) Rename(oldname, newname string) error {
	if f.bad(oldname) || f.bad(newname) {
		return erofs("rename", oldname)
	}
	return f.FS.Rename(oldname, newname)
}

func (f roFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.bad(oldname) || f.bad(newname) {
		return nil, erofs("rename", oldname)
	}
	return f.FS.ReuseForWrite(oldname, newname, c)
}

func (f roFS) Lock(name string) (io.Closer, error) {
	if f.bad(name) {
		return nil, erofs("lock", name)
	}
	return f.FS.Lock(name)
}

func (f roFS) Remove(name string) error {
	if f.bad(name) {
		return erofs("remove", name)
	}
	return f.FS.Remove(name)
}

func (f roFS) RemoveAll(name string) error {
	if f.bad(name) {
		return erofs("remove", name)
	}
	return f.FS.RemoveAll(name)
}
