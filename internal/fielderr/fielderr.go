// Package fielderr lets a library error name the Config fields it is
// about, so that a caller that sets those fields from somewhere else can
// name its own words for them: the library says {StartupTimeout}, the CLI
// prints --startup-timeout.
//
// In the format of Errorf a field is written {Name} (a Go identifier,
// optionally dotted: {Topics.Market}). Error prints the bare name; Rename
// prints what the caller's function returns for it. Only the format is
// scanned for fields, never the arguments, so braces in a wrapped error or
// a value are left alone.
package fielderr

import (
	"fmt"
	"strings"
)

// Error is an error whose message names Config fields.
type Error struct {
	format string
	args   []any
	fields []string
	err    error // the message with the bare field names, wrapping as fmt.Errorf does
}

// Errorf formats like fmt.Errorf (%w wraps) after replacing each {Field}
// in format with the field's name.
func Errorf(format string, args ...any) *Error {
	e := &Error{format: format, args: args}
	e.fields = fieldsOf(format)
	e.err = fmt.Errorf(e.with(nil), args...)
	return e
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the errors wrapped with %w.
func (e *Error) Unwrap() []error {
	switch u := e.err.(type) {
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	}
	return nil
}

// Fields returns the fields the message names, in order, each once.
func (e *Error) Fields() []string { return e.fields }

// Rename returns the message with each field named by name(field); a
// field for which name returns "" keeps its own name.
func (e *Error) Rename(name func(field string) string) string {
	return fmt.Errorf(e.with(name), e.args...).Error()
}

// Rename returns err's message with the fields of every *Error in its tree
// named by name(field).
func Rename(err error, name func(field string) string) string {
	msg := err.Error()
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*Error); ok {
			msg = strings.Replace(msg, fe.Error(), fe.Rename(name), 1)
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				walk(next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				walk(next)
			}
		}
	}
	walk(err)
	return msg
}

// with returns format with every {Field} replaced by name(Field), or by
// Field when name is nil or returns "".
func (e *Error) with(name func(string) string) string {
	var b strings.Builder
	scan(e.format, func(lit, field string) {
		b.WriteString(lit)
		if field == "" {
			return
		}
		n := ""
		if name != nil {
			n = name(field)
		}
		if n == "" {
			n = field
		}
		b.WriteString(strings.ReplaceAll(n, "%", "%%"))
	})
	return b.String()
}

func fieldsOf(format string) []string {
	var fields []string
	seen := map[string]bool{}
	scan(format, func(_, field string) {
		if field != "" && !seen[field] {
			seen[field] = true
			fields = append(fields, field)
		}
	})
	return fields
}

// scan calls emit with each run of literal text and the field after it
// ("" at the end). A brace that does not enclose an identifier is literal.
func scan(format string, emit func(lit, field string)) {
	lit := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '{' {
			continue
		}
		j := i + 1
		for j < len(format) && isIdent(format[j], j == i+1) {
			j++
		}
		if j == i+1 || j >= len(format) || format[j] != '}' || format[j-1] == '.' {
			continue
		}
		emit(format[lit:i], format[i+1:j])
		lit, i = j+1, j
	}
	emit(format[lit:], "")
}

func isIdent(c byte, first bool) bool {
	switch {
	case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', c == '_':
		return true
	case '0' <= c && c <= '9', c == '.':
		return !first
	}
	return false
}
