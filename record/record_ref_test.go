package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
)

// The reflection decoders DecodeTick and DecodeNotification used before the
// schema scanner of scan.go: the reference the fuzz targets and the
// benchmarks compare it with. Do not change them to match the scanner.

func refDecodeTick(value []byte, maxBytes int) (Tick, error) {
	var t struct {
		Symbol *string  `json:"symbol"`
		Price  *float64 `json:"price"`
	}
	if err := refDecodeStrict(value, maxBytes, &t); err != nil {
		return Tick{}, err
	}
	if t.Symbol == nil {
		return Tick{}, reject(ReasonMissingField, "tick has no symbol")
	}
	if t.Price == nil {
		return Tick{}, reject(ReasonMissingField, "tick for %q has no price", *t.Symbol)
	}
	if err := CheckSymbol(*t.Symbol); err != nil {
		return Tick{}, err
	}
	// A price is a finite number greater than zero.
	if math.IsNaN(*t.Price) || math.IsInf(*t.Price, 0) || *t.Price <= 0 {
		return Tick{}, reject(ReasonInvalidValue, "tick for %q has the price %v: a price is a finite number greater than zero", *t.Symbol, *t.Price)
	}
	return Tick{Symbol: *t.Symbol, Price: *t.Price}, nil
}

func refDecodeNotification(value []byte, maxBytes int) (Notification, error) {
	var n struct {
		ID     *string `json:"id"`
		User   *string `json:"user"`
		Symbol *string `json:"symbol"`
		Text   *string `json:"text"`
	}
	if err := refDecodeStrict(value, maxBytes, &n); err != nil {
		return Notification{}, err
	}
	if n.Symbol == nil {
		return Notification{}, reject(ReasonMissingField, "notification has no symbol")
	}
	if n.ID == nil || *n.ID == "" {
		return Notification{}, reject(ReasonMissingField, "notification for %q has no id", *n.Symbol)
	}
	if err := CheckSymbol(*n.Symbol); err != nil {
		return Notification{}, err
	}
	out := Notification{ID: *n.ID, Symbol: *n.Symbol}
	if n.User != nil {
		out.User = *n.User
	}
	if n.Text != nil {
		out.Text = *n.Text
	}
	return out, nil
}

func refDecodeStrict(value []byte, maxBytes int, v any) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRecordBytes
	}
	if len(value) > maxBytes {
		return reject(ReasonOversized, "record of %d bytes exceeds the limit of %d", len(value), maxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return reject(ReasonWrongType, "field %q must be a %s, not %s", te.Field, te.Type, te.Value)
		}
		return reject(ReasonInvalidJSON, "%v", err)
	}
	if dec.More() {
		return reject(ReasonInvalidJSON, "trailing data after the JSON object")
	}
	return nil
}
