package configs

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// invalidKeys matches mapstructure's "'path' has invalid keys: " prefix.
var invalidKeys = regexp.MustCompile(`'([^']*)' has invalid keys: `)

// goTypeName matches the Go type name ("prefix.Config") that
// mapstructure puts where the path is empty (the top level being
// decoded); YAML keys are lower case.
var goTypeName = regexp.MustCompile(`^\*?[A-Za-z0-9_]+\.[A-Z][A-Za-z0-9_]*$`)

// quotedKey matches the "'path' " mapstructure puts before the error of
// one key, at the start of the message or of one of its "; "-joined parts.
var quotedKey = regexp.MustCompile(`(^|; )'([^' ]+)' `)

var decodeHook = mapstructure.ComposeDecodeHookFunc(
	durationHook,
	mapstructure.StringToSliceHookFunc(","),
)

var durationType = reflect.TypeFor[time.Duration]()

// durationHook decodes every time.Duration of a profile from a Go duration
// string ("15s", "1m30s", "250ms"). A number without a unit is refused
// rather than read as nanoseconds — YAML `min_dwell: 15` would otherwise be
// 15 ns — except 0, which is the same in every unit. mapstructure prefixes
// the error with the key.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	if from.Kind() == reflect.String {
		s := strings.TrimSpace(data.(string))
		d, err := time.ParseDuration(s)
		if err == nil {
			return d, nil
		}
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return nil, unitless(s)
		}
		return nil, fmt.Errorf("%q is not a duration; write it with a unit, like 15s, 1m30s or 250ms", s)
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, unitless(fmt.Sprint(data))
	}
	return data, nil
}

func unitless(n string) error {
	return fmt.Errorf("%s has no unit; write %ss (or %sms, %sm) — a bare number is not read as nanoseconds", n, n, n, n)
}

// Decode fills into (a component's Config, already holding its defaults)
// from raw YAML params, rejecting unknown fields. It is the decode function
// handed to scorer factories.
func Decode(raw map[string]any, into any) error {
	if len(raw) == 0 {
		return nil
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		ErrorUnused: true,
		DecodeHook:  decodeHook,
		Result:      into,
	})
	if err != nil {
		return err
	}
	return cleanDecodeError(dec.Decode(raw))
}

// cleanDecodeError strips mapstructure's preamble so the message names
// the field first.
func cleanDecodeError(err error) error {
	if err == nil {
		return nil
	}
	msg := inUserWords(err).Error()
	msg = strings.TrimPrefix(msg, "decoding failed due to the following error(s):\n\n")
	msg = strings.ReplaceAll(msg, "\n", "; ")
	msg = invalidKeys.ReplaceAllStringFunc(msg, func(m string) string {
		sub := invalidKeys.FindStringSubmatch(m)
		if sub[1] == "" || goTypeName.MatchString(sub[1]) {
			return "unknown field: "
		}
		return sub[1] + ": unknown field: "
	})
	msg = quotedKey.ReplaceAllString(msg, "$1$2: ")
	return errors.New(msg)
}
