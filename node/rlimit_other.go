//go:build !unix

package node

var nofile = struct {
	get func() (uint64, uint64, error)
	set func(uint64, uint64) error
}{}
