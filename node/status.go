package node

import (
	"net/http"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/statuspage"
)

// newStatusPage builds the worker's status page (package statuspage) over
// its Processor.
func (n *Node) newStatusPage() *statuspage.Server {
	fs := n.cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	return statuspage.New(statuspage.Options{
		Source:    n.worker,
		Instance:  n.cfg.InstanceID,
		Group:     n.cfg.Group,
		Addr:      n.addr,
		StateDirs: n.cfg.Dirs,
		FreeBytes: func(dir string) (uint64, error) {
			u, err := fs.GetDiskUsage(dir)
			return u.AvailBytes, err
		},
		Client: n.peer.client(),
	})
}

// withStatusPage serves the status page on / and /v1/status next to h
// (the HTTP API).
func withStatusPage(h http.Handler, page *statuspage.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	ph := page.Handler()
	mux.Handle("GET /{$}", ph)
	mux.Handle("GET /v1/status", ph)
	return mux
}

// StatusURL is the URL of the node's status page.
func (n *Node) StatusURL() string {
	scheme := "http"
	if n.peer.serverTLS != nil {
		scheme = "https"
	}
	return scheme + "://" + n.addr + "/"
}
