package partitionq

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// Limits on names, keys and the number of slots.
const (
	// MaxSlots is the largest number of slots a group may have. Every slot
	// reads the whole stream, so N multiplies the read cost (docs/tuning.md).
	MaxSlots = 256
	// MaxNameLen is the longest queue or group name.
	MaxNameLen = 48
	// MaxKeyLen is the longest partition key, in bytes.
	MaxKeyLen = 512
	// MaxTypeLen is the longest event type, in bytes.
	MaxTypeLen = 256
)

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func validateName(field, v string) error {
	switch {
	case v == "":
		return &ValidationError{Field: field, Value: `""`, Problem: "it is empty", Fix: "give a name of letters, digits, '_', '.' or '-'"}
	case len(v) > MaxNameLen:
		return &ValidationError{Field: field, Value: shorten(v), Problem: fmt.Sprintf("it is %d bytes long, more than %d", len(v), MaxNameLen), Fix: "use a shorter name"}
	case !nameRe.MatchString(v):
		return &ValidationError{Field: field, Value: shorten(v), Problem: "it may only contain letters, digits, '_', '.' and '-', and must start with a letter or digit", Fix: "rename it"}
	}
	return nil
}

// ValidateQueueName checks a queue name: 1 to MaxNameLen bytes of letters,
// digits, '_', '.' and '-', starting with a letter or a digit. Every call
// that takes a queue checks it so, with this *ValidationError; a program
// checks its input with it before it calls (the CLI checks --queue).
func ValidateQueueName(q string) error { return validateName("queue name", q) }

// ValidateGroupName checks a consumer group name, by the rule of queue
// names (see ValidateQueueName).
func ValidateGroupName(g string) error { return validateName("group name", g) }

// ValidateSlots checks a number of slots: 1 to MaxSlots, as Setup and
// Resize do (see ValidateQueueName).
func ValidateSlots(n int) error {
	if n < 1 || n > MaxSlots {
		return &ValidationError{Field: "number of slots", Value: strconv.Itoa(n), Problem: fmt.Sprintf("it must be between 1 and %d", MaxSlots), Fix: "pick a small N such as 4 or 8 (docs/tuning.md)"}
	}
	return nil
}

// ValidateKey checks a partition key: 1 to MaxKeyLen bytes of text (see
// Message for the rule), as Send and every call that takes a key do (see
// ValidateQueueName).
func ValidateKey(k string) error {
	if k == "" {
		return &ValidationError{Field: "key", Value: `""`, Problem: "it is empty", Fix: "give every event a partition key (for example the tenant id)"}
	}
	return validateText("key", k, MaxKeyLen)
}

// maxText bounds free text (a payload, a reason, an actor): what one
// PostgreSQL text value can hold.
const maxText = 1 << 30

// validateText is the one rule for text that partitionq stores (keys,
// types, payloads, actors, reasons): at most max bytes of valid UTF-8
// without NUL bytes. Valid UTF-8 excludes the surrogate code points U+D800
// to U+DFFF (bytes ED A0 80 to ED BF BF), which a Go string can hold but
// which are not characters. The rule is what PostgreSQL text can hold, so
// that a value is stored as it was given or refused, never changed (the
// command decodes JSON without loss, so an unpaired "\ud800" escape reaches
// this rule instead of becoming U+FFFD).
func validateText(field, v string, max int) error {
	bad := func(problem, fix string) error {
		return &ValidationError{Field: field, Value: shorten(v), Problem: problem, Fix: fix}
	}
	if len(v) > max {
		return bad(fmt.Sprintf("it is %d bytes long, more than %d", len(v), max), "shorten it")
	}
	if utf8.ValidString(v) && strings.IndexByte(v, 0) < 0 {
		return nil
	}
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == 0:
			return bad(fmt.Sprintf("it contains a NUL byte (at offset %d), which PostgreSQL text cannot hold", i),
				"remove the NUL bytes (or base64-encode binary data)")
		case r == utf8.RuneError && size == 1:
			if s, ok := termsafe.Surrogate(v[i:]); ok {
				return bad(fmt.Sprintf(`it contains %U (at offset %d), an unpaired UTF-16 surrogate, which is not a character (in JSON: a lone \u%04x escape)`, s, i, s),
					`write the whole character (in JSON both halves of a pair, such as \ud83d\ude00) or remove it`)
			}
			return bad(fmt.Sprintf("it is not valid UTF-8 (byte 0x%02x at offset %d), which PostgreSQL text cannot hold", v[i], i),
				"encode it as UTF-8 (or base64 for binary data)")
		}
		i += size
	}
	return nil
}

// validateActorReason checks who acts and why, for the audit trail and the
// dead letters, with the text rule.
func validateActorReason(actor, reason string) error {
	if err := validateText("actor", actor, maxText); err != nil {
		return err
	}
	return validateText("reason", reason, maxText)
}

// shorten quotes a value for a ValidationError: clipped, escaped
// (partitionq/termsafe.Echo, the helper of every error that echoes input).
func shorten(v string) string { return termsafe.Echo(v) }

// consumerName is the engine consumer of one slot: "<group>#<slot>/<n>".
// The number of slots is encoded so it can be recovered from the engine.
func consumerName(group string, slot, n int) string {
	return group + "#" + strconv.Itoa(slot) + "/" + strconv.Itoa(n)
}

// consumerPrefix is what every slot consumer name of group starts with.
func consumerPrefix(group string) string { return group + "#" }

var consumerRe = regexp.MustCompile(`^(.+)#([0-9]+)/([0-9]+)$`)

// parseConsumerName splits a slot consumer name; ok is false for any other name.
func parseConsumerName(name string) (group string, slot, n int, ok bool) {
	m := consumerRe.FindStringSubmatch(name)
	if m == nil {
		return "", 0, 0, false
	}
	slot, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || n < 1 || slot >= n {
		return "", 0, 0, false
	}
	return m[1], slot, n, true
}
