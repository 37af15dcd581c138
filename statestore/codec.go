package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Key layout inside one task's DB.
//
//	v/<symbol> 0x00 <^ts, 8 bytes BE> <^offset, 8 bytes BE>  → one version of a price
//	m/offset                                                   → applied market offset
//	m/format                                                   → layout version of the DB
//
// Inside one symbol the versions sort newest first: by timestamp
// descending, then by offset descending. "The latest version of S with a
// timestamp ≤ T" is therefore the first key at or after
// versionSeekKey(S, T): one seek. A symbol never contains 0x00 (callers
// reject control characters), so the separator keeps symbols apart: "AB"
// and "ABC" have disjoint key ranges.
const (
	versionPrefix = "v/"
	offsetKey     = "m/offset"
	formatKey     = "m/format"
	// legacyPricePrefix held one latest price per symbol in the first
	// layout (format 1, which had no format key).
	legacyPricePrefix = "p/"
)

// formatVersioned is the value of formatKey for this layout.
const formatVersioned = 2

// Value encodings, each led by a version byte.
const (
	// versionV1: version byte, 8-byte LE float64 bits, flags byte, and
	// with flagTruncated the 8-byte LE timestamp of the symbol's oldest
	// version ever stored (pruned since).
	versionV1 = 1
	offsetV1  = 1 // version byte, zigzag varint offset
)

// Flags of a stored version.
const (
	// flagTruncated marks the oldest kept version of a symbol after older
	// ones were pruned: a lookup before it is "late", not a miss.
	flagTruncated = 1 << 0
)

// errCorruptValue marks a stored key or value that does not decode.
var errCorruptValue = errors.New("corrupt stored value")

// orderedTs maps a signed timestamp to an unsigned one with the same order,
// then inverts it so that newer sorts first.
func invTs(ts int64) uint64 { return ^(uint64(ts) ^ (1 << 63)) }

func tsFromInv(u uint64) int64 { return int64(^u ^ (1 << 63)) }

// symbolPrefix is the key prefix of every version of symbol.
func symbolPrefix(dst []byte, symbol string) []byte {
	dst = append(dst, versionPrefix...)
	dst = append(dst, symbol...)
	return append(dst, 0)
}

// symbolUpper is the first key after every version of symbol.
func symbolUpper(dst []byte, symbol string) []byte {
	dst = append(dst, versionPrefix...)
	dst = append(dst, symbol...)
	return append(dst, 1)
}

// versionKey is the key of the version of symbol at tsMs from offset.
func versionKey(dst []byte, symbol string, tsMs, offset int64) []byte {
	dst = symbolPrefix(dst, symbol)
	dst = binary.BigEndian.AppendUint64(dst, invTs(tsMs))
	return binary.BigEndian.AppendUint64(dst, ^uint64(offset))
}

// versionSeekKey is the smallest key of symbol's versions with a timestamp
// ≤ tsMs: the newest such version is the first key at or after it.
func versionSeekKey(dst []byte, symbol string, tsMs int64) []byte {
	dst = symbolPrefix(dst, symbol)
	dst = binary.BigEndian.AppendUint64(dst, invTs(tsMs))
	return binary.BigEndian.AppendUint64(dst, 0)
}

// versionSuffixLen is the length of a version key after its symbol prefix.
const versionSuffixLen = 16

// decodeVersionKey splits a version key into its symbol, timestamp and
// offset. It never panics.
func decodeVersionKey(k []byte) (symbol string, tsMs, offset int64, err error) {
	rest, ok := bytes.CutPrefix(k, []byte(versionPrefix))
	if !ok || len(rest) < versionSuffixLen+2 || rest[len(rest)-versionSuffixLen-1] != 0 {
		return "", 0, 0, fmt.Errorf("version key %q: malformed: %w", k, errCorruptValue)
	}
	sym := rest[:len(rest)-versionSuffixLen-1]
	if bytes.IndexByte(sym, 0) >= 0 {
		return "", 0, 0, fmt.Errorf("version key %q: NUL in symbol: %w", k, errCorruptValue)
	}
	suffix := rest[len(rest)-versionSuffixLen:]
	tsMs = tsFromInv(binary.BigEndian.Uint64(suffix))
	offset = int64(^binary.BigEndian.Uint64(suffix[8:]))
	if offset < 0 {
		return "", 0, 0, fmt.Errorf("version key %q: negative offset: %w", k, errCorruptValue)
	}
	return string(sym), tsMs, offset, nil
}

// versionMeta is what a stored version says beyond its price.
type versionMeta struct {
	flags byte
	// firstTs, with flagTruncated, is the timestamp of the oldest version
	// of the symbol ever stored: a lookup before it is a miss, not late.
	firstTs int64
}

func (m versionMeta) truncated() bool { return m.flags&flagTruncated != 0 }

// appendVersionValue appends the encoding of a version's price and meta
// (the symbol, timestamp and offset are in the key).
func appendVersionValue(dst []byte, price float64, meta versionMeta) []byte {
	dst = append(dst, versionV1)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(price))
	dst = append(dst, meta.flags)
	if meta.truncated() {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(meta.firstTs))
	}
	return dst
}

// decodeVersionValue decodes a stored version value. It never panics;
// malformed input yields an error wrapping errCorruptValue.
func decodeVersionValue(b []byte) (price float64, meta versionMeta, err error) {
	switch {
	case len(b) == 0:
		return 0, meta, fmt.Errorf("price version: empty value: %w", errCorruptValue)
	case b[0] != versionV1:
		return 0, meta, fmt.Errorf("price version: unknown encoding %d: %w", b[0], errCorruptValue)
	case len(b) < 10:
		return 0, meta, fmt.Errorf("price version: %d bytes, want at least 10: %w", len(b), errCorruptValue)
	}
	price, meta.flags = math.Float64frombits(binary.LittleEndian.Uint64(b[1:])), b[9]
	want := 10
	if meta.truncated() {
		want = 18
	}
	if meta.flags&^flagTruncated != 0 || len(b) != want {
		return 0, versionMeta{}, fmt.Errorf("price version: flags %#x with %d bytes: %w", meta.flags, len(b), errCorruptValue)
	}
	if meta.truncated() {
		meta.firstTs = int64(binary.LittleEndian.Uint64(b[10:]))
	}
	return price, meta, nil
}

// decodeVersion decodes a stored key and value into a Tick.
func decodeVersion(k, v []byte) (Tick, versionMeta, error) {
	sym, ts, off, err := decodeVersionKey(k)
	if err != nil {
		return Tick{}, versionMeta{}, err
	}
	price, meta, err := decodeVersionValue(v)
	if err != nil {
		return Tick{}, versionMeta{}, fmt.Errorf("%q at %d (offset %d): %w", sym, ts, off, err)
	}
	return Tick{Symbol: sym, Price: price, TimestampMs: ts, Offset: off}, meta, nil
}

func appendOffset(dst []byte, offset int64) []byte {
	return binary.AppendVarint(append(dst, offsetV1), offset)
}

// decodeOffset decodes the stored applied offset. It never panics.
func decodeOffset(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("applied offset: empty value: %w", errCorruptValue)
	}
	if b[0] != offsetV1 {
		return 0, fmt.Errorf("applied offset: unknown encoding version %d: %w", b[0], errCorruptValue)
	}
	off, n := binary.Varint(b[1:])
	if n <= 0 || 1+n != len(b) || off < -1 {
		return 0, fmt.Errorf("applied offset: malformed: %w", errCorruptValue)
	}
	return off, nil
}

// versionKeyLen is the length of versionKey(nil, symbol, …).
func versionKeyLen(symbol string) int {
	return len(versionPrefix) + len(symbol) + 1 + versionSuffixLen
}

// versionValueLen is the length of a version value without flagTruncated.
const versionValueLen = 10

// batchBytes is an upper bound of the size of the Pebble batch Apply builds
// for ticks: per version a kind byte, two length varints, key and value;
// then the applied offset and the batch header.
func batchBytes(ticks []Tick) int {
	n := 64
	for i := range ticks {
		n += 1 + 2*binaryMaxVarintLen16 + versionKeyLen(ticks[i].Symbol) + versionValueLen
	}
	return n
}

// binaryMaxVarintLen16 bounds the varint of a key or value length: keys
// and values of a version are far below 16 KiB.
const binaryMaxVarintLen16 = 3
