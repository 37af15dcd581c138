//go:build unix

package node

import "syscall"

func getNofile() (cur, max uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, err
	}
	return uint64(l.Cur), uint64(l.Max), nil
}

func setNofile(cur, max uint64) error {
	l := syscall.Rlimit{Cur: cur, Max: max}
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

var nofile = struct {
	get func() (uint64, uint64, error)
	set func(uint64, uint64) error
}{getNofile, setNofile}
