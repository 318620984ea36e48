package configs

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// maxEchoedValue bounds the bytes of a file's value that an error repeats.
const maxEchoedValue = 64

// inUserWords rewrites mapstructure's type errors in err — "'x' cannot
// parse value as 'float64': strconv.ParseFloat: invalid syntax" — as the
// key, what it takes and what the file gave: `x: want a number, got
// "high"`. Errors joined by the decoder stay joined; any other error is
// kept as it is.
func inUserWords(err error) error {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		out := make([]error, len(errs))
		for i, x := range errs {
			out[i] = inUserWords(x)
		}
		return errors.Join(out...)
	case *mapstructure.DecodeError:
		return decodeErrorInUserWords(e)
	case interface{ Unwrap() error }:
		// The decoder's "decoding failed due to the following error(s)"
		// preamble around the joined errors: cleanDecodeError drops it.
		if inner := e.Unwrap(); inner != nil {
			if _, joined := inner.(interface{ Unwrap() []error }); joined {
				return inUserWords(inner)
			}
		}
	}
	return err
}

func decodeErrorInUserWords(de *mapstructure.DecodeError) error {
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	inner := de.Unwrap()
	switch {
	case inner == nil:
	case errors.As(inner, &pe):
		return fmt.Errorf("%s: want %s, got %s", de.Name(), wantWords(pe.Expected.Type()), gotWords(pe.Value))
	case errors.As(inner, &ue):
		return fmt.Errorf("%s: want %s, got %s", de.Name(), wantWords(ue.Expected.Type()), gotWords(ue.Value))
	case strings.HasPrefix(inner.Error(), "expected a map or struct, got "):
		kind := strings.Trim(strings.TrimPrefix(inner.Error(), "expected a map or struct, got "), `"`)
		return fmt.Errorf("%s: want a section of keys, got %s", de.Name(), kindWords(kind))
	}
	return de
}

// wantWords says what a key of Go type t takes, as a YAML file writes it.
func wantWords(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration such as 500ms or 15s"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return wantWords(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number ≥ 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a section of keys"
	}
	return "a " + t.String()
}

// gotWords says what a file gave: a scalar as written (a string quoted
// and cut to maxEchoedValue bytes), a list or section by its kind.
func gotWords(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		if len(x) > maxEchoedValue {
			cut := maxEchoedValue
			for cut > 0 && x[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
				cut--
			}
			x = x[:cut] + "…"
		}
		return strconv.Quote(x)
	}
	return kindWords(reflect.TypeOf(v).Kind().String())
}

// kindWords names a Go reflect kind as YAML would.
func kindWords(kind string) string {
	switch {
	case kind == "slice" || kind == "array":
		return "a list"
	case kind == "map" || kind == "struct":
		return "a section"
	case kind == "bool":
		return "true or false"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	}
	return kind
}
