package partitionq

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
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

// ValidateQueueName checks a queue name.
func ValidateQueueName(q string) error { return validateName("queue name", q) }

// ValidateGroupName checks a consumer group name.
func ValidateGroupName(g string) error { return validateName("group name", g) }

// ValidateSlots checks a number of slots.
func ValidateSlots(n int) error {
	if n < 1 || n > MaxSlots {
		return &ValidationError{Field: "number of slots", Value: strconv.Itoa(n), Problem: fmt.Sprintf("it must be between 1 and %d", MaxSlots), Fix: "pick a small N such as 4 or 8 (docs/tuning.md)"}
	}
	return nil
}

// ValidateKey checks a partition key: 1 to MaxKeyLen bytes of valid UTF-8
// without NUL bytes, which is what PostgreSQL text can hold.
func ValidateKey(k string) error {
	if k == "" {
		return &ValidationError{Field: "key", Value: `""`, Problem: "it is empty", Fix: "give every event a partition key (for example the tenant id)"}
	}
	return validateText("key", k, MaxKeyLen)
}

func validateText(field, v string, max int) error {
	switch {
	case len(v) > max:
		return &ValidationError{Field: field, Value: shorten(v), Problem: fmt.Sprintf("it is %d bytes long, more than %d", len(v), max), Fix: "shorten it"}
	case !utf8.ValidString(v):
		return &ValidationError{Field: field, Value: shorten(v), Problem: "it is not valid UTF-8, which PostgreSQL text cannot hold", Fix: "encode it as UTF-8 (or base64 for binary data)"}
	case strings.IndexByte(v, 0) >= 0:
		return &ValidationError{Field: field, Value: shorten(v), Problem: "it contains a NUL byte, which PostgreSQL text cannot hold", Fix: "remove the NUL bytes (or base64-encode binary data)"}
	}
	return nil
}

func shorten(v string) string {
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return strconv.Quote(v)
}

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
