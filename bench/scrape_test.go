package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// scrape sums a labelled counter over its series (the restore figure reads
// joiner_restore_records_total, which has a reason label) and reads
// unlabelled samples as they are.
func TestScrapeSumsLabelledSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP joiner_restore_records_total x
# TYPE joiner_restore_records_total counter
joiner_restore_records_total{reason="failover"} 0
joiner_restore_records_total{reason="move"} 1e+06
joiner_restore_records_total{reason="standby"} 5
joiner_restore_seconds_sum 1.5
`)
	}))
	defer srv.Close()
	m, err := scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := m["joiner_restore_records_total"]; got != 1000005 {
		t.Errorf("joiner_restore_records_total = %v, want 1000005", got)
	}
	if got := m["joiner_restore_seconds_sum"]; got != 1.5 {
		t.Errorf("joiner_restore_seconds_sum = %v, want 1.5", got)
	}
}
