package connstr_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/connstr"
)

// forms are the connection strings users write: the README's URL, each
// sslmode, localhost and 127.0.0.1, keyword/value strings, passwords that
// need encoding or quoting, several hosts, IPv6, query parameters.
var forms = []string{
	"postgres://postgres@localhost:5432/postgres",
	"postgres://postgres@localhost:5432/postgres?sslmode=prefer",
	"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
	"postgres://postgres@127.0.0.1/postgres?sslmode=disable&connect_timeout=1",
	"postgresql://u:p%40ss%3Aw%2Frd%20x@db.example:6543/app?sslmode=require&application_name=a%20b&pool_max_conns=3",
	"postgres://u:secret@h1:5432,h2:5433/app?target_session_attrs=read-write",
	"postgres://u@[::1]:5432/app",
	"postgres://localhost",
	"postgres://u@localhost:5432/app?dbname=other",
	"host=localhost port=5432 user=postgres dbname=postgres",
	"host=127.0.0.1 dbname=postgres sslmode=disable",
	"host=localhost user=u password='p a\\'s\\\\s' dbname=app pool_max_conns=3 application_name=x",
	"  user = postgres   host=localhost  ",
	"host=localhost database=app",
}

func parse(t *testing.T, s string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s)
	if err != nil {
		t.Fatalf("pgx cannot parse %q: %v", s, err)
	}
	return cfg
}

type target struct {
	Host string
	Port uint16
	TLS  bool
}

// targets lists every address pgx tries, with or without TLS.
func targets(c *pgconn.Config) []target {
	out := []target{{c.Host, c.Port, c.TLSConfig != nil}}
	for _, f := range c.Fallbacks {
		out = append(out, target{f.Host, f.Port, f.TLSConfig != nil})
	}
	return out
}

// same fails unless a and b connect alike but for what except allows to differ.
func same(t *testing.T, a, b *pgxpool.Config, except ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	ac, bc := a.ConnConfig, b.ConnConfig
	check := func(name string, x, y any) {
		if !skip[name] && !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %v, want %v", name, y, x)
		}
	}
	check("targets", targets(&ac.Config), targets(&bc.Config))
	check("user", ac.User, bc.User)
	check("password", ac.Password, bc.Password)
	check("database", ac.Database, bc.Database)
	check("runtime params", ac.RuntimeParams, bc.RuntimeParams)
	check("connect timeout", ac.ConnectTimeout, bc.ConnectTimeout)
	check("pool max conns", a.MaxConns, b.MaxConns)
}

func TestParseStringGivesBackWhatWasWritten(t *testing.T) {
	for _, s := range forms {
		c, err := connstr.Parse(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		want := s
		if !c.IsURL() {
			want = strings.Join(strings.Fields(strings.ReplaceAll(s, " = ", "=")), " ") // one space between pairs
		}
		if got := c.String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", s, got, want)
		}
		same(t, parse(t, s), parse(t, c.String()))
	}
}

func TestWithDatabaseKeepsEverythingElse(t *testing.T) {
	for _, s := range forms {
		got, err := connstr.WithDatabase(s, "pqtest_x")
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if strings.HasPrefix(got, "postgres") != strings.HasPrefix(s, "postgres") {
			t.Errorf("WithDatabase(%q) = %q: the form changed", s, got)
		}
		cfg := parse(t, got)
		if cfg.ConnConfig.Database != "pqtest_x" {
			t.Errorf("WithDatabase(%q) = %q connects to database %q", s, got, cfg.ConnConfig.Database)
		}
		same(t, parse(t, s), cfg, "database")
	}
}

func TestSetHostAndPortMovesEveryAttempt(t *testing.T) {
	// Under sslmode=prefer pgx tries each address twice: with TLS, then
	// without (a fallback). Pointing only the first attempt at a proxy
	// leaves the fallback on the real server.
	for _, s := range forms {
		c, err := connstr.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.Set("host", "127.0.0.1")
		c.Set("port", "40000")
		before, after := parse(t, s), parse(t, c.String())
		for _, tg := range targets(&after.ConnConfig.Config) {
			if tg.Host != "127.0.0.1" || tg.Port != 40000 {
				t.Errorf("%q moved to 127.0.0.1:40000 is %q, which still tries %s:%d", s, c.String(), tg.Host, tg.Port)
			}
		}
		// As many attempts with and without TLS per host as before.
		var tlsBefore, tlsAfter []bool
		for _, tg := range targets(&before.ConnConfig.Config) {
			if tg.Host == before.ConnConfig.Host {
				tlsBefore = append(tlsBefore, tg.TLS)
			}
		}
		for _, tg := range targets(&after.ConnConfig.Config) {
			tlsAfter = append(tlsAfter, tg.TLS)
		}
		if !reflect.DeepEqual(tlsBefore, tlsAfter) {
			t.Errorf("%q moved: TLS attempts %v, want %v", s, tlsAfter, tlsBefore)
		}
		same(t, before, after, "targets")
	}
}

func TestGet(t *testing.T) {
	cases := []struct {
		s, key, want string
		ok           bool
	}{
		{"postgres://postgres@localhost:5432/postgres", "sslmode", "", false},
		{"postgres://postgres@localhost:5432/postgres?sslmode=prefer", "sslmode", "prefer", true},
		{"postgres://u:p%40ss@h/app", "password", "p@ss", true},
		{"postgres://u@h/app", "password", "", false},
		{"postgres://u@h/app", "dbname", "app", true},
		{"postgres://u@h/app?dbname=other", "dbname", "other", true},
		{"postgres://u@h/app?database=other", "dbname", "other", true},
		{"postgres://h", "dbname", "", false},
		{"postgres://u@h1:1,h2/app", "host", "h1,h2", true},
		{"postgres://u@h1:1,h2/app", "port", "1,", true},
		{"postgres://u@[::1]:5432/app", "host", "::1", true},
		{"postgres://u@h/db?pool_max_conns=3", "pool_max_conns", "3", true},
		{"postgres://u@h/db?sslmode=disable", "pool_max_conns", "", false},
		{"host=h pool_max_conns=3 dbname=db", "pool_max_conns", "3", true},
		{"host=h dbname=db", "pool_max_conns", "", false},
		{"host=h dbname=a dbname=b", "dbname", "b", true},
		{"host=h database=a", "dbname", "a", true},
		{"host=h password='a b\\'c'", "password", "a b'c", true},
	}
	for _, c := range cases {
		cs, err := connstr.Parse(c.s)
		if err != nil {
			t.Fatalf("%q: %v", c.s, err)
		}
		if got, ok := cs.Get(c.key); got != c.want || ok != c.ok {
			t.Errorf("Parse(%q).Get(%q) = %q, %v; want %q, %v", c.s, c.key, got, ok, c.want, c.ok)
		}
	}
}

func TestSetWritesEachSettingWhereItsFormPutsIt(t *testing.T) {
	cases := []struct{ s, key, value, want string }{
		{"postgres://u@h:1/db", "pool_max_conns", "1", "postgres://u@h:1/db?pool_max_conns=1"},
		{"postgres://u@h:1/db?sslmode=disable", "pool_max_conns", "1", "postgres://u@h:1/db?sslmode=disable&pool_max_conns=1"},
		{"postgres://u@h:1/db?sslmode=disable", "sslmode", "require", "postgres://u@h:1/db?sslmode=require"},
		{"postgres://postgres@h:1/db?sslmode=disable", "user", "r_login", "postgres://r_login@h:1/db?sslmode=disable"},
		{"postgres://postgres:pw@h:1/db", "user", "r", "postgres://r:pw@h:1/db"},
		{"postgres://u@h/db", "password", "a@b:c/d", "postgres://u:a%40b%3Ac%2Fd@h/db"},
		{"postgres://h", "dbname", "x", "postgres://h/x"},
		{"postgres://h/db?dbname=other", "dbname", "x", "postgres://h/x?dbname=x"},
		{"postgres://h/db", "application_name", "a b&c", "postgres://h/db?application_name=a%20b%26c"},
		{"postgres://u@h1:1,h2:2/db", "host", "127.0.0.1", "postgres://u@127.0.0.1:1/db"},
		{"postgres://u@h/db", "host", "/tmp", "postgres://u@h/db?host=%2Ftmp"},
		{"postgres://u@h/db", "host", "::1", "postgres://u@[::1]/db"},
		{"host=h dbname=db", "pool_max_conns", "1", "host=h dbname=db pool_max_conns=1"},
		{"host=h user=postgres dbname=db", "user", "r_login", "host=h user=r_login dbname=db"},
		{"host=h", "password", "it's a\\b", "host=h password='it\\'s a\\\\b'"},
		{"host=h", "application_name", "", "host=h application_name=''"},
	}
	for _, c := range cases {
		cs, err := connstr.Parse(c.s)
		if err != nil {
			t.Fatalf("%q: %v", c.s, err)
		}
		cs.Set(c.key, c.value)
		if got := cs.String(); got != c.want {
			t.Errorf("%q with %s=%q: %q, want %q", c.s, c.key, c.value, got, c.want)
		}
		if c.key == "password" {
			if got := parse(t, cs.String()).ConnConfig.Password; got != c.value {
				t.Errorf("%q: pgx reads the password %q, want %q", cs.String(), got, c.value)
			}
		}
	}
}

func TestWithConnectTimeout(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "") // restored after the test; unset here
	os.Unsetenv("PGCONNECT_TIMEOUT")
	t.Run("unless set", func(t *testing.T) {
		for _, s := range forms {
			c, _ := connstr.Parse(s)
			_, had := c.Get("connect_timeout")
			got, err := connstr.WithConnectTimeout(s)
			if err != nil {
				t.Fatal(err)
			}
			if had {
				if got != s {
					t.Errorf("WithConnectTimeout(%q) = %q: the string sets its own", s, got)
				}
				continue
			}
			cfg := parse(t, got)
			if cfg.ConnConfig.ConnectTimeout != connstr.ConnectTimeoutDefault {
				t.Errorf("WithConnectTimeout(%q) = %q: connect timeout %s, want %s", s, got, cfg.ConnConfig.ConnectTimeout, connstr.ConnectTimeoutDefault)
			}
			same(t, parse(t, s), cfg, "connect timeout")
		}
	})
	t.Run("PGCONNECT_TIMEOUT", func(t *testing.T) {
		t.Setenv("PGCONNECT_TIMEOUT", "9")
		s := "postgres://u@h/db"
		if got, _ := connstr.WithConnectTimeout(s); got != s {
			t.Errorf("with PGCONNECT_TIMEOUT set: %q", got)
		}
		if d := parse(t, s).ConnConfig.ConnectTimeout; d != 9*time.Second {
			t.Errorf("pgx reads PGCONNECT_TIMEOUT as %s", d)
		}
	})
}

func TestURL(t *testing.T) {
	for _, s := range append(forms, "host=/tmp port=5433 dbname=app", "host=h1,h2 port=1,2 user=u dbname=app sslmode=disable") {
		c, err := connstr.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		u := c.URL()
		if !strings.HasPrefix(u, "postgres") {
			t.Errorf("Parse(%q).URL() = %q", s, u)
		}
		same(t, parse(t, s), parse(t, u))
	}
}

func TestRedacted(t *testing.T) {
	for s, want := range map[string]string{
		"postgres://u:secret@h/db?sslmode=disable": "postgres://u:xxxxx@h/db?sslmode=disable",
		"postgres://u@h/db?password=secret":        "postgres://u:xxxxx@h/db?password=xxxxx",
		"host=h password=secret dbname=db":         "host=h password=xxxxx dbname=db",
		"postgres://u@h/db":                        "postgres://u@h/db",
	} {
		c, err := connstr.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Redacted(); got != want {
			t.Errorf("Parse(%q).Redacted() = %q, want %q", s, got, want)
		}
		if c.String() != s {
			t.Errorf("Redacted changed %q to %q", s, c.String())
		}
	}
}

func TestParseErrors(t *testing.T) {
	for s, want := range map[string]string{
		"host=h password='open":     "no closing quote",
		"nonsense":                  "has no '='",
		"host h=1":                  "bad keyword",
		"postgres://u:%zz@h/db":     "invalid password",
		"postgres://u@h/d%zzb":      "invalid database name",
		"postgres://u@h/db?sslmode": "has no '='",
		"host=h\x00":                "NUL",
	} {
		_, err := connstr.Parse(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error saying %q", s, err, want)
		}
		if strings.Contains(s, "%zz@") && err != nil && strings.Contains(err.Error(), "zz") {
			t.Errorf("Parse(%q) quotes the password: %v", s, err)
		}
	}
}

func ExampleWithDatabase() {
	for _, s := range []string{
		"postgres://app:s3cret@localhost:5432/postgres?sslmode=disable",
		"host=localhost user=app dbname=postgres",
	} {
		s, _ = connstr.WithDatabase(s, "app_test")
		fmt.Println(s)
	}
	// Output:
	// postgres://app:s3cret@localhost:5432/app_test?sslmode=disable
	// host=localhost user=app dbname=app_test
}
