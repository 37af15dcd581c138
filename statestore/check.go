package statestore

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/internal/fielderr"
)

// A state dir is checked once, when the Manager opens, as Kafka Streams
// checks its state dir when it starts: <dir>/<group> is created, a probe
// file is created in it, written, fsynced and removed, and the group's lock
// (lock.go) is taken. A dir that fails any step fails Open, and so the
// worker's start (exit 1), naming the dir and the errno. A full disk
// (ENOSPC, EDQUOT) does not: it is a WARN, and the stores placed there fail
// their free-space check (diskfull.go), so their tasks move to other
// members while the dir stays full. Faults that appear later (a dir that
// turns read-only, a disk that fills) stay per task: the task's store
// fails and the task is released (join/restore_faults.go).

// probeName is the probe file written into each group dir at Open.
const probeName = ".joiner-probe"

// checkDir checks that gdir, the group dir of one state dir, can hold
// stores: it creates it, then creates, writes, fsyncs and removes a probe
// file in it.
func checkDir(fs vfs.FS, gdir string) error {
	if err := fs.MkdirAll(gdir, 0o755); err != nil {
		return dirError("create it", gdir, err)
	}
	p := fs.PathJoin(gdir, probeName+"-"+strconv.Itoa(os.Getpid()))
	f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return dirError("create a file in it", gdir, err)
	}
	_, werr := f.Write([]byte("joiner checks that this state dir is writable; safe to delete\n"))
	if werr == nil {
		werr = dirError("fsync a file in it", gdir, f.Sync())
	} else {
		werr = dirError("write a file in it", gdir, werr)
	}
	cerr := f.Close()
	rerr := fs.Remove(p)
	if werr != nil {
		return werr
	}
	if cerr != nil {
		return dirError("write a file in it", gdir, cerr)
	}
	if rerr != nil {
		return dirError("remove a file in it", gdir, rerr)
	}
	return nil
}

// dirError is the error of a state dir that failed op at start, or nil.
func dirError(op, gdir string, err error) error {
	if err == nil {
		return nil
	}
	return fielderr.Errorf("statestore: state dir %s cannot be used: %s: %w (%s); give a writable dir in {Dirs}",
		gdir, op, err, Errno(err))
}

// Errno names the system error number under err ("EROFS", "ENOSPC", ...),
// or says there is none.
func Errno(err error) string {
	var no syscall.Errno
	if !errors.As(err, &no) {
		if errors.Is(err, os.ErrPermission) {
			return "permission denied, no errno"
		}
		return "no errno"
	}
	if name, ok := errnoNames[no]; ok {
		return "errno " + name
	}
	return "errno " + strconv.Itoa(int(no))
}

var errnoNames = map[syscall.Errno]string{
	syscall.EACCES: "EACCES", syscall.EPERM: "EPERM", syscall.EROFS: "EROFS",
	syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT", syscall.EIO: "EIO",
	syscall.ENOENT: "ENOENT", syscall.ENOTDIR: "ENOTDIR", syscall.EEXIST: "EEXIST",
	syscall.EISDIR: "EISDIR", syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ELOOP: "ELOOP",
	syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.EBUSY: "EBUSY",
	syscall.EWOULDBLOCK: "EWOULDBLOCK", syscall.EINVAL: "EINVAL",
}

// CheckDirs checks every state dir as Open does, on the OS's filesystem,
// without taking the locks: `joiner run` calls it first, so that an
// unusable state dir fails the start at once, before Kafka is reached. A
// full disk is no error (Open warns of it).
func CheckDirs(dirs []string, group string) error {
	for _, d := range dirs {
		if err := checkDir(vfs.Default, vfs.Default.PathJoin(d, group)); err != nil && !IsDiskFull(err) {
			return err
		}
	}
	return nil
}
