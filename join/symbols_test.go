package join

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestSymbolTable: intern returns an equal string that shares no memory
// with the one given, the same copy for every alias of a symbol, and stops
// keeping symbols at its bound (copying them still).
func TestSymbolTable(t *testing.T) {
	var tab symbolTable
	buf := []byte("BBCA TLKM")
	a := tab.intern(unsafe.String(&buf[0], 4))
	if a != "BBCA" || unsafe.StringData(a) == &buf[0] {
		t.Fatalf("intern = %q at %p; want a copy of BBCA, not the buffer at %p", a, unsafe.StringData(a), &buf[0])
	}
	if b := tab.intern(strings.Clone("BBCA")); unsafe.StringData(b) != unsafe.StringData(a) {
		t.Error("a second alias of BBCA got another copy")
	}
	buf[0] = 'X'
	if a != "BBCA" || tab.intern("BBCA") != "BBCA" {
		t.Errorf("changing the buffer changed the interned symbol to %q", a)
	}
	for i := len(tab.m); i < maxInternedSymbols+10; i++ {
		tab.intern("S" + strconv.Itoa(i))
	}
	if len(tab.m) != maxInternedSymbols {
		t.Errorf("%d symbols kept; want the bound, %d", len(tab.m), maxInternedSymbols)
	}
	late := []byte("LATE")
	if c := tab.intern(unsafe.String(&late[0], 4)); c != "LATE" || unsafe.StringData(c) == &late[0] {
		t.Errorf("past the bound, intern = %q aliasing the buffer: %v", c, unsafe.StringData(c) == &late[0])
	}
}

// The ticks decoded for the store do not refer to the fetched values
// (decoded without copying), which the store's cache would otherwise pin.
func TestDecodeTicksDoesNotAliasTheRecords(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	recs := []fetchedRecord{recAt(0, 1000, `{"symbol":"BBCA","price":1}`), recAt(1, 2000, `{"symbol":"TLKM","price":2}`)}
	ticks, dead := pt.st.decodeTicks(recs, 0)
	if len(ticks) != 2 || len(dead) != 0 {
		t.Fatalf("decoded %d ticks, %d dead letters; want 2, 0", len(ticks), len(dead))
	}
	for _, r := range recs {
		for i := range r.Value {
			r.Value[i] = 'X'
		}
	}
	if ticks[0].Symbol != "BBCA" || ticks[1].Symbol != "TLKM" {
		t.Errorf("symbols changed with the records' bytes: %q, %q", ticks[0].Symbol, ticks[1].Symbol)
	}
}

func BenchmarkSymbolTableIntern(b *testing.B) {
	var tab symbolTable
	syms := make([]string, 1000)
	for i := range syms {
		syms[i] = "SYM" + strconv.Itoa(1000+i)
		tab.intern(syms[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tab.intern(syms[i%len(syms)])
		i++
	}
}
