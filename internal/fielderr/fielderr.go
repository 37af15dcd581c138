// Package fielderr lets a library error name the Config fields it is
// about, so that a caller that sets those fields from somewhere else can
// name its own words for them: the library says {StartupTimeout}, the CLI
// prints --startup-timeout.
//
// In the format of Errorf a field is written {Name} (a Go identifier,
// optionally dotted: {Topics.Market}). Error prints the bare name; Rename
// prints what the caller's function returns for it. Only the format is
// scanned for fields, never the arguments, so braces in a wrapped error or
// a value are left alone. Handler does the same for the errors in log
// records, so a library's log lines name the caller's words too.
package fielderr

import (
	"context"
	"fmt"
	"log/slog"
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

// Names reports whether an *Error in err's tree names field, so that a
// wrapping error need not give the same hint again.
func Names(err error, field string) bool {
	for _, e := range walk(err) {
		for _, f := range e.fields {
			if f == field {
				return true
			}
		}
	}
	return false
}

// walk returns the *Error values in err's tree, outermost first.
func walk(err error) []*Error {
	var out []*Error
	var visit func(error)
	visit = func(err error) {
		if fe, ok := err.(*Error); ok {
			out = append(out, fe)
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				visit(next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				visit(next)
			}
		}
	}
	if err != nil {
		visit(err)
	}
	return out
}

// Rename returns err's message with the fields of every *Error in its tree
// named by name(field).
func Rename(err error, name func(field string) string) string {
	msg := err.Error()
	for _, fe := range walk(err) {
		msg = strings.Replace(msg, fe.Error(), fe.Rename(name), 1)
	}
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

// Handler returns a slog.Handler that writes every error-valued
// attribute, also in groups and in WithAttrs, with its fields named by
// name(field) (Rename) before h sees it: a library logs its errors as they
// are, and a command line's logger names its flags.
func Handler(h slog.Handler, name func(field string) string) slog.Handler {
	return renameHandler{h, name}
}

// renameHandler rewrites every error-valued attribute with
// fielderr.Rename before h sees it.
type renameHandler struct {
	h    slog.Handler
	name func(field string) string
}

func (r renameHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r renameHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, rec.Message, rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r renameHandler) WithAttrs(as []slog.Attr) slog.Handler {
	renamed := make([]slog.Attr, len(as))
	for i, a := range as {
		renamed[i] = r.attr(a)
	}
	return renameHandler{r.h.WithAttrs(renamed), r.name}
}

func (r renameHandler) WithGroup(name string) slog.Handler {
	return renameHandler{r.h.WithGroup(name), r.name}
}

func (r renameHandler) attr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, Rename(err, r.name))
		}
	case slog.KindGroup:
		as := a.Value.Group()
		renamed := make([]any, len(as))
		for i, g := range as {
			renamed[i] = r.attr(g)
		}
		return slog.Group(a.Key, renamed...)
	}
	return a
}
