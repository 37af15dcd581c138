package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Key layout inside one task's DB.
const (
	pricePrefix = "p/"       // "p/<symbol>" → encoded price
	offsetKey   = "m/offset" // applied market offset
)

// Value encodings, each led by a version byte so later versions can change
// the layout and still read old stores.
const (
	priceV1  = 1 // version, 8-byte little-endian float64 bits, zigzag varint TimestampMs
	offsetV1 = 1 // version, zigzag varint offset
)

// errCorruptValue marks a stored value that does not decode.
var errCorruptValue = errors.New("corrupt stored value")

func priceKey(symbol string) []byte {
	k := make([]byte, 0, len(pricePrefix)+len(symbol))
	return append(append(k, pricePrefix...), symbol...)
}

// appendPrice appends the encoding of t's price and timestamp (the symbol is
// in the key).
func appendPrice(dst []byte, t Tick) []byte {
	dst = append(dst, priceV1)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(t.Price))
	return binary.AppendVarint(dst, t.TimestampMs)
}

// decodePrice decodes a stored price of symbol. It never panics; malformed
// input yields an error wrapping errCorruptValue.
func decodePrice(symbol string, b []byte) (Tick, error) {
	if len(b) == 0 {
		return Tick{}, fmt.Errorf("price of %q: empty value: %w", symbol, errCorruptValue)
	}
	if b[0] != priceV1 {
		return Tick{}, fmt.Errorf("price of %q: unknown encoding version %d: %w", symbol, b[0], errCorruptValue)
	}
	b = b[1:]
	if len(b) < 8 {
		return Tick{}, fmt.Errorf("price of %q: %d bytes, want at least 9: %w", symbol, len(b)+1, errCorruptValue)
	}
	price := math.Float64frombits(binary.LittleEndian.Uint64(b))
	ts, n := binary.Varint(b[8:])
	if n <= 0 || 8+n != len(b) {
		return Tick{}, fmt.Errorf("price of %q: bad timestamp: %w", symbol, errCorruptValue)
	}
	return Tick{Symbol: symbol, Price: price, TimestampMs: ts}, nil
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
