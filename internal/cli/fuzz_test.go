package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// FuzzSendLines runs `partitionq send --queue q` with fuzzed standard input
// against a real database. Whatever the input: the command exits 0 (every
// non-blank line became one event, in order, with the key the line gave,
// and no stored text holds a U+FFFD that the input did not write: invalid
// UTF-8 and unpaired surrogate escapes are refused, never replaced) or
// 1 with one short "partitionq: ..." error, and then nothing at all was
// sent, not even the lines before the bad one. The seed corpus is in
// testdata/fuzz/FuzzSendLines.
func FuzzSendLines(f *testing.F) {
	db := pgtest.New(f)
	pool := pgtest.Pool(f, db, 4)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2}); err != nil {
		f.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `create table canary (x int); insert into canary values (1)`); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"key":"a","type":"T","payload":{"n":1}}` + "\n" + `{"key":"b","payload":"s"}`,
		"\n\n" + `{"key":"a"}` + "\r\n   \n",
		`{"key":"a"}` + "\n" + `{"key":""}`,
		`{"key":"a"}` + "\n" + `not json`,
		`{"key":"a"}` + "\n" + `{"key":"b","payload":"\u0000"}`,
		`{"key":"'; drop table canary; --","type":"$$ drop table canary $$","payload":"') or 1=1; --"}`,
		`{"key":"a"}{"key":"b"}`,
		strings.Repeat(`{"key":"bulk","payload":1}`+"\n", 1001) + `{"key":"bad","x":1}`,
		"{\"key\":\"\xff\"}",
		"{\"key\":\"\xff\"}\n{\"key\":\"\xfe\"}\n{\"key\":\"\\ud800\"}",
		`{"key":"a"}` + "\n" + `{"key":"k","type":"a\udc00b","payload":"a\udc00b"}`,
		`{"key":"\ud83d\ude00","payload":"\ufffd"}`,
		"\xef\xbb\xbf{\"key\":\"a\"}",
		`{"key":"a","payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	} {
		f.Add(s)
	}
	lineRe := regexp.MustCompile(`^partitionq: standard input, line ([0-9]+): `)
	f.Fuzz(func(t *testing.T, input string) {
		before := countEvents(t, db, pool)
		var out, errb bytes.Buffer
		code := cli.Main(ctx, []string{"send", "--queue", "q", "--json"}, cli.Env{
			Stdin: strings.NewReader(input), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return db.URL
				}
				return ""
			},
		})
		sent := countEvents(t, db, pool) - before
		var alive int
		if err := pool.QueryRow(ctx, `select count(*) from canary`).Scan(&alive); err != nil || alive != 1 {
			t.Fatalf("the canary table was touched: %v", err)
		}
		var keys []string
		for _, l := range strings.Split(input, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				var k struct {
					Key string `json:"key"`
				}
				json.Unmarshal([]byte(l), &k) // only for good lines
				keys = append(keys, k.Key)
			}
		}
		switch code {
		case cli.ExitOK:
			var res struct {
				Sent int `json:"sent"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if res.Sent != len(keys) || sent != len(keys) {
				t.Fatalf("%d non-blank lines, the command says %d sent, %d stored", len(keys), res.Sent, sent)
			}
			var stored int
			if err := pool.QueryRow(ctx, db.SQL(`select coalesce(sum(length(t) - length(replace(t, U&'\FFFD', ''))), 0)
				from (select ev_id, coalesce(ev_extra1, '') || coalesce(ev_type, '') || coalesce(ev_data, '') as t
				      from pgq.event_1 order by ev_id desc limit $1) last`), len(keys)).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if spelled := cli.SpelledFFFD(input); stored > spelled {
				t.Fatalf("the input writes %d U+FFFD, the events hold %d: a line was changed, not refused", spelled, stored)
			}
			if len(keys) > 0 {
				rows, err := pool.Query(ctx, db.SQL(`select ev_extra1 from pgq.event_1 order by ev_id desc limit $1`), len(keys))
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for rows.Next() {
					var k string
					if err := rows.Scan(&k); err != nil {
						t.Fatal(err)
					}
					got = append([]string{k}, got...)
				}
				if rows.Err() != nil || strings.Join(got, "\x00") != strings.Join(keys, "\x00") {
					t.Fatalf("stored keys %q, lines gave %q (%v)", got, keys, rows.Err())
				}
			}
		case cli.ExitFailed:
			if sent != 0 {
				t.Fatalf("a failed send stored %d events", sent)
			}
			msg := errb.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Fatalf("error is not one line: %q", msg)
			}
			m := lineRe.FindStringSubmatch(msg)
			if m == nil {
				t.Fatalf("error does not name the line: %q", msg)
			}
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > strings.Count(input, "\n")+1 {
				t.Fatalf("error names line %d of an input of %d lines: %q", n, strings.Count(input, "\n")+1, msg)
			}
			if !strings.HasSuffix(msg, ": nothing was sent\n") {
				t.Fatalf("error does not say that nothing was sent: %q", msg)
			}
		default:
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	})
}

func countEvents(t *testing.T, db pgtest.DB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), db.SQL(`select count(*) from pgq.event_1`)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
