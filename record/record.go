// Package record owns the formats of joiner's topics: the tick (market),
// notification (notifications) and alert (alerts) JSON values, their
// decoders (a schema scanner, no reflection) and encoders, the reasons a
// record is dead-lettered, and the topic names with their defaults.
//
// Adding a format or a field starts here: the decoder, its encoder, the
// fuzz target comparing the decoder with the strict reference decoder in
// record_ref_test.go, and TestAppendAlertEveryField for an alert field.
package record

import (
	"errors"
	"fmt"
	"math"
)

// Tick is one price update read from the market topic.
//
//	{"symbol":"BBCA","price":9125.5}
//
// The record timestamp is the time of the price, and the record key is
// the symbol (CheckKey). A price is a finite number greater than zero:
// zero, negative and non-finite prices are rejected (ReasonInvalidValue).
type Tick struct {
	Symbol string  `json:"symbol"`
	Price  float64 `json:"price"`
}

// Notification is one user notification read from the notifications topic.
//
//	{"id":"n-42","user":"u-7","symbol":"BBCA","text":"BBCA moved"}
//
// id and symbol are required; user and text are optional. The record
// timestamp is the time of the notification.
type Notification struct {
	ID     string `json:"id"`
	User   string `json:"user,omitempty"`
	Symbol string `json:"symbol"`
	Text   string `json:"text,omitempty"`
}

// Result classifies one join.
type Result string

// The join results, also the values of the result label of
// joiner_joins_total.
const (
	// ResultLocal: the price came from this member's own store.
	ResultLocal Result = "local"
	// ResultRemote: the symbol's task is owned by another member, which
	// answered the lookup.
	ResultRemote Result = "remote"
	// ResultLate: the notification is older than the retained price
	// history (--history-retention) of its symbol; the alert carries the
	// oldest price kept, which is newer than the notification.
	ResultLate Result = "late"
	// ResultMiss: the symbol had no price at the notification's time.
	ResultMiss Result = "miss"
)

// Results are the join results in a fixed order: a result's Index in it
// indexes arrays of one entry per result.
var Results = [...]Result{ResultLocal, ResultRemote, ResultLate, ResultMiss}

// Index is r's place in Results, -1 for a value that is none of them.
func (r Result) Index() int {
	for i, x := range Results {
		if r == x {
			return i
		}
	}
	return -1
}

// Alert is the enriched notification written to the alerts topic, keyed by
// symbol: the notification's fields plus the joined price.
type Alert struct {
	Notification
	// NotificationTsMs is the notification record's timestamp, in Unix ms.
	NotificationTsMs int64 `json:"notification_ts_ms"`
	// Price and PriceTsMs are the price as of the notification's time (on
	// a late join, the oldest price kept); absent on a miss.
	Price     *float64 `json:"price,omitempty"`
	PriceTsMs int64    `json:"price_ts_ms,omitempty"`
	Result    Result   `json:"result"`
	// Worker is the instance id of the member that produced the alert.
	Worker string `json:"worker"`
}

// Reasons a record is sent to the dead-letter topic; the values of the
// reason label of joiner_dead_letters_total and of the
// "joiner-dead-letter-reason" header.
const (
	ReasonInvalidJSON  = "invalid_json"
	ReasonMissingField = "missing_field"
	ReasonWrongType    = "wrong_type"
	ReasonOversized    = "oversized"
	ReasonInvalidValue = "invalid_value"
	// ReasonAlertTooLarge: the alert of a notification is larger than the
	// alerts topic's max.message.bytes; the dead letter holds the alert.
	ReasonAlertTooLarge = "alert_too_large"
	// ReasonAlertRejected: the alerts topic refused the alert of a
	// notification as an invalid record; the dead letter holds the alert.
	ReasonAlertRejected = "alert_rejected"
	// ReasonKeyMismatch: a tick whose record key is not its symbol
	// (CheckKey).
	ReasonKeyMismatch = "key_mismatch"
)

// Reasons lists every dead-letter reason.
var Reasons = []string{ReasonInvalidJSON, ReasonMissingField, ReasonWrongType, ReasonOversized, ReasonInvalidValue,
	ReasonAlertTooLarge, ReasonAlertRejected, ReasonKeyMismatch}

// DefaultMaxRecordBytes bounds the value of an input record.
const DefaultMaxRecordBytes = 64 << 10

// maxSymbolBytes bounds a symbol, which is also a Pebble key and a URL path
// segment.
const maxSymbolBytes = 128

// Error says why an input record was rejected. Reason is one of the
// Reason constants.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the dead-letter reason of a decoding error: the Reason
// of an *Error in err's chain, else ReasonInvalidValue.
func ReasonOf(err error) string {
	var re *Error
	if errors.As(err, &re) {
		return re.Reason
	}
	return ReasonInvalidValue
}

func reject(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// DecodeTick parses and validates a market record value. It never panics;
// every rejection is a *Error. It uses the schema scanner of scan.go,
// not reflection. The result does not refer to value.
func DecodeTick(value []byte, maxBytes int) (Tick, error) {
	return decodeTickWith(value, maxBytes, tickFields, false)
}

// DecodeTickShared is DecodeTick without copying: the Symbol of the result
// aliases value's bytes unless it had escapes, so value must not be
// modified while the result (or the Symbol taken from it) is in use, and
// the Symbol keeps value's whole backing array alive. Use it only on bytes
// that are never written again, and copy the Symbol (strings.Clone)
// before keeping it for long (a map key, a cache).
func DecodeTickShared(value []byte, maxBytes int) (Tick, error) {
	return decodeTickWith(value, maxBytes, tickFields, true)
}

// decodeTickWith decodes a tick whose symbol and price members are
// fields (a schema of newField("symbol"...), newField("price"...) or a
// Decoder's names).
func decodeTickWith(value []byte, maxBytes int, fields [2]jsonField, shared bool) (Tick, error) {
	if err := checkSize(value, maxBytes); err != nil {
		return Tick{}, err
	}
	f := fields
	if err := scanRecord(value, f[:], shared); err != nil {
		return Tick{}, err
	}
	symbol, price := &f[0], &f[1]
	if !symbol.set {
		return Tick{}, reject(ReasonMissingField, "tick has no symbol")
	}
	if !price.set {
		return Tick{}, reject(ReasonMissingField, "tick for %q has no price", symbol.str)
	}
	if err := CheckSymbol(symbol.str); err != nil {
		return Tick{}, err
	}
	if err := checkPrice(symbol.str, price.num); err != nil {
		return Tick{}, err
	}
	return Tick{Symbol: symbol.str, Price: price.num}, nil
}

// checkPrice rejects a price that is not a finite number greater than
// zero.
func checkPrice(symbol string, price float64) error {
	if !(price > 0) || math.IsInf(price, 1) { // NaN is not > 0
		return reject(ReasonInvalidValue, "tick for %q has the price %v: a price is a finite number greater than zero", symbol, price)
	}
	return nil
}

// CheckKey reports whether key, a market record's key, is the symbol of
// its tick, byte for byte. A tick keyed otherwise was partitioned by
// another key than its symbol: it is stored by the task of its key's
// partition while its symbol's notifications look it up in the task of
// the symbol's, so it is rejected (ReasonKeyMismatch) even when both keys
// happen to fall on the same partition (that depends on the partition
// count, which may change). The error is an *Error.
func CheckKey(key []byte, symbol string) error {
	if string(key) != symbol {
		return reject(ReasonKeyMismatch, "tick for %q has the record key %q: market records are keyed by their symbol", symbol, truncateKey(key))
	}
	return nil
}

// truncateKey bounds a key quoted in an error.
func truncateKey(key []byte) []byte {
	if len(key) > maxSymbolBytes {
		return key[:maxSymbolBytes]
	}
	return key
}

// DecodeNotification parses and validates a notifications record value. It
// never panics; every rejection is a *Error. It uses the schema
// scanner of scan.go, not reflection. The result does not refer to value
// (its strings are substrings of one copy of it).
func DecodeNotification(value []byte, maxBytes int) (Notification, error) {
	return decodeNotification(value, maxBytes, false)
}

// DecodeNotificationShared is DecodeNotification without copying: the
// strings of the result alias value's bytes (unless they had escapes), so
// value must not be modified while the result (or any string taken from
// it) is in use, and each of those strings keeps value's whole backing
// array alive. Use it only on bytes that are never written again, and copy
// a string (strings.Clone) before keeping it for long (a map key, a
// cache). It accepts and rejects exactly what DecodeNotification does.
func DecodeNotificationShared(value []byte, maxBytes int) (Notification, error) {
	return decodeNotification(value, maxBytes, true)
}

func decodeNotification(value []byte, maxBytes int, shared bool) (Notification, error) {
	if err := checkSize(value, maxBytes); err != nil {
		return Notification{}, err
	}
	f := notificationFields
	if err := scanRecord(value, f[:], shared); err != nil {
		return Notification{}, err
	}
	id, user, symbol, text := &f[0], &f[1], &f[2], &f[3]
	if !symbol.set {
		return Notification{}, reject(ReasonMissingField, "notification has no symbol")
	}
	if !id.set || id.str == "" {
		return Notification{}, reject(ReasonMissingField, "notification for %q has no id", symbol.str)
	}
	if err := CheckSymbol(symbol.str); err != nil {
		return Notification{}, err
	}
	return Notification{ID: id.str, User: user.str, Symbol: symbol.str, Text: text.str}, nil
}

// The schemas of ticks and notifications, copied by each decoding.
var (
	tickFields         = [2]jsonField{newField("symbol", false), newField("price", true)}
	notificationFields = [4]jsonField{newField("id", false), newField("user", false), newField("symbol", false), newField("text", false)}
)

func checkSize(value []byte, maxBytes int) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRecordBytes
	}
	if len(value) > maxBytes {
		return reject(ReasonOversized, "record of %d bytes exceeds the limit of %d", len(value), maxBytes)
	}
	return nil
}

// CheckSymbol reports whether s is a valid symbol: non-empty, at most 128
// bytes, without control, space or '/' characters (a symbol is also a
// Pebble key and a URL path segment). The error is an *Error.
func CheckSymbol(s string) error {
	switch {
	case s == "":
		return reject(ReasonMissingField, "symbol is empty")
	case len(s) > maxSymbolBytes:
		return reject(ReasonInvalidValue, "symbol of %d bytes exceeds %d", len(s), maxSymbolBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c == 0x7f || c == '/' {
			return reject(ReasonInvalidValue, "symbol %q has a control, space or '/' character", s)
		}
	}
	return nil
}
