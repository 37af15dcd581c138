package demo_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/joiner-dev/joiner/join"
)

// lookup asks the worker at addr for a symbol's price.
func lookup(t *testing.T, addr, symbol string) (float64, bool) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/v1/prices/" + symbol)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, false
	}
	var p join.Price
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.Price, true
}
