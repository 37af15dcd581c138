package statestore

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble keeps a directory open for every directory it may have to sync
// (the store's own, once for its objects, its WAL, each of its marker
// files): five descriptors per open store, more than its LOCK, WAL and
// MANIFEST together. A worker with a thousand tasks so held 8 files per
// task. OpenDir hands Pebble a lazyDir instead: it holds no descriptor,
// and a Sync opens the directory, syncs it and closes it (a directory is
// synced when a file in it is created, renamed or removed: at a flush, a
// compaction or a WAL rotation, not per write).

// OpenDir checks that the directory opens and returns a lazyDir of it.
func (f *faultFS) OpenDir(name string) (vfs.File, error) {
	d, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	if err := d.Close(); err != nil {
		return nil, err
	}
	return &lazyDir{fs: f, name: name}, nil
}

// lazyDir is a directory that is open only while it is synced.
type lazyDir struct {
	fs   *faultFS
	name string
}

var errLazyDir = errors.New("statestore: a directory is not read or written")

func (d *lazyDir) Sync() error {
	f, err := d.fs.FS.OpenDir(d.name)
	if err != nil {
		return d.fs.check(err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return d.fs.check(err)
}

func (d *lazyDir) SyncData() error                    { return d.Sync() }
func (d *lazyDir) SyncTo(int64) (bool, error)         { return false, nil } // a no-op for directories
func (d *lazyDir) Close() error                       { return nil }
func (d *lazyDir) Read([]byte) (int, error)           { return 0, errLazyDir }
func (d *lazyDir) ReadAt([]byte, int64) (int, error)  { return 0, errLazyDir }
func (d *lazyDir) Write([]byte) (int, error)          { return 0, errLazyDir }
func (d *lazyDir) WriteAt([]byte, int64) (int, error) { return 0, errLazyDir }
func (d *lazyDir) Preallocate(int64, int64) error     { return nil }
func (d *lazyDir) Stat() (vfs.FileInfo, error)        { return d.fs.FS.Stat(d.name) }
func (d *lazyDir) Prefetch(int64, int64) error        { return nil }
func (d *lazyDir) Fd() uintptr                        { return vfs.InvalidFd }
