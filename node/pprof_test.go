package node

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWithPprof(t *testing.T) {
	app := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusTeapot) })
	tests := []struct {
		on   bool
		path string
		want int
	}{
		{false, "/debug/pprof/", http.StatusTeapot}, // off: the app's handler answers
		{false, "/metrics", http.StatusTeapot},
		{true, "/debug/pprof/", http.StatusOK},
		{true, "/debug/pprof/goroutine?debug=1", http.StatusOK},
		{true, "/debug/pprof/cmdline", http.StatusOK},
		{true, "/metrics", http.StatusTeapot},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		withPprof(app, tt.on).ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
		if rec.Code != tt.want {
			t.Errorf("pprof %v, GET %s = %d; want %d", tt.on, tt.path, rec.Code, tt.want)
		}
	}
}
