// Package dlqfilter reads the dead-letter filters that the CLI's --filter
// flag and the console's filter prompt share: words such as
//
//	key=tenant-42 type=FileDeleted error="disk full" reason=skip since=24h before=2024-05-01 pending id=17,18
//
// each narrowing partitionq.DeadLetterQuery. Values with spaces are quoted
// with double quotes (a backslash escapes a quote or a backslash inside).
package dlqfilter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// Fields names the fields a filter takes, for help texts.
const Fields = "key=K type=T error=TEXT reason=PREFIX since=TIME before=TIME pending id=1,2"

// Apply parses expr and narrows q with it; now anchors ages (since=24h).
// A field given twice keeps the last value, except id, whose lists add up.
func Apply(q *partitionq.DeadLetterQuery, expr string, now time.Time) error {
	words, err := split(expr)
	if err != nil {
		return err
	}
	for _, w := range words {
		name, value, hasValue := strings.Cut(w, "=")
		if name == "pending" && !hasValue {
			q.Pending = true
			continue
		}
		if !hasValue {
			return fmt.Errorf("filter word %s has no value: write field=value, with fields %s", termsafe.Echo(w), Fields)
		}
		switch name {
		case "key":
			q.Key = value
		case "type":
			q.Type = value
		case "error":
			q.Error = value
		case "reason":
			q.Reason = value
		case "since", "before":
			t, err := ParseTime(value, now)
			if err != nil {
				return fmt.Errorf("filter %s=%s: %w", name, termsafe.Echo(value), err)
			}
			if name == "since" {
				q.DeadAfter = t
			} else {
				q.DeadBefore = t
			}
		case "pending":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return fmt.Errorf("filter pending=%s: give pending, pending=true or pending=false", termsafe.Echo(value))
			}
			q.Pending = b
		case "id":
			for _, s := range strings.Split(value, ",") {
				id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				if err != nil || id < 1 {
					return fmt.Errorf("filter id=%s: %s is not a dead letter id: give ids such as id=17,18", termsafe.Echo(value), termsafe.Echo(s))
				}
				q.IDs = append(q.IDs, id)
			}
		default:
			return fmt.Errorf("unknown filter field %s: use %s", termsafe.Echo(name), Fields)
		}
	}
	return nil
}

// split cuts expr into words at spaces outside double quotes, removing the
// quotes.
func split(expr string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted, escaped := false, false, false
	for _, r := range expr {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted, inWord = !quoted, true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted || escaped {
		return nil, errors.New(`filter has an unclosed quote: close it, as in error="disk full"`)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// ParseTime reads a time: RFC 3339 (2024-05-01T12:00:00Z), a date or a date
// and time in local time (2024-05-01, 2024-05-01 12:00:00), or an age
// meaning that long before now (72h, 30m).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateTime, s, time.Local); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errors.New("give a time (2024-05-01T12:00:00Z, 2024-05-01 or 2024-05-01 12:00:00) or an age (72h)")
}

// Format writes q's filters back as a filter expression that Apply reads.
func Format(q partitionq.DeadLetterQuery) string {
	var words []string
	add := func(name, v string) {
		if v == "" {
			return
		}
		if strings.ContainsAny(v, " \t\"\\") || v == "" {
			v = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
		}
		words = append(words, name+"="+v)
	}
	add("key", q.Key)
	add("type", q.Type)
	add("error", q.Error)
	add("reason", q.Reason)
	if !q.DeadAfter.IsZero() {
		add("since", q.DeadAfter.Format(time.RFC3339))
	}
	if !q.DeadBefore.IsZero() {
		add("before", q.DeadBefore.Format(time.RFC3339))
	}
	if q.Pending {
		words = append(words, "pending")
	}
	if len(q.IDs) > 0 {
		ids := make([]string, len(q.IDs))
		for i, id := range q.IDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		words = append(words, "id="+strings.Join(ids, ","))
	}
	return strings.Join(words, " ")
}
