// Package connstr reads and rewrites PostgreSQL connection strings in the
// two forms pgx and libpq accept: a URL
// (postgres://user:secret@host:5432/db?sslmode=disable) and a keyword/value
// string (host=h port=5432 dbname=db). It is the one place partitionq
// rewrites a connection string: a rewrite keeps the string's form and every
// setting it does not change (the password, sslmode, other query
// parameters), so what the user wrote is what connects.
//
// It parses as pgx does (the userinfo ends at the first '@' before any
// '/', a query parameter overrides the same setting written in the URL's
// other parts, "database" is another name for "dbname", the last of
// repeated keywords wins) but checks no values: pgx reports those when it
// parses the result.
package connstr

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ConnectTimeoutDefault is the connect_timeout WithConnectTimeout gives a
// connection string that sets none. pgx applies it to each address it
// tries (localhost may be two: ::1 and 127.0.0.1).
const ConnectTimeoutDefault = 5 * time.Second

// ConnString is a parsed connection string. Set changes it; String gives it
// back in its own form, with the parts nothing changed exactly as written.
// Not safe for concurrent use.
type ConnString struct {
	isURL bool
	// The URL's parts, as written (raw) until Set changes them.
	scheme   string  // "postgres://" or "postgresql://"
	userinfo *string // nil: no '@'
	netloc   string
	path     *string // without its '/'; nil: no '/'
	params   []param // the URL's query, or the keyword/value pairs, in order
}

type param struct {
	key, value string // decoded; key canonical ("database" is "dbname")
	raw        string // as written; "" once Set changed it
}

// Parse parses a URL (it starts with postgres:// or postgresql://) or a
// keyword/value string. The empty string is a keyword/value string with no
// settings.
func Parse(s string) (*ConnString, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("invalid connection string: it holds a NUL byte")
	}
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(s, scheme); ok {
			return parseURL(scheme, rest)
		}
	}
	return parseKeywords(s)
}

func parseURL(scheme, p string) (*ConnString, error) {
	c := &ConnString{isURL: true, scheme: scheme}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		ui := p[:i]
		c.userinfo, p = &ui, p[i+1:]
		if _, _, _, err := c.userPassword(); err != nil {
			return nil, err
		}
	}
	i := strings.IndexAny(p, "/?")
	if i < 0 {
		i = len(p)
	}
	c.netloc, p = p[:i], p[i:]
	if strings.HasPrefix(p, "/") {
		path, _, _ := strings.Cut(p[1:], "?")
		if _, err := decode(path); err != nil {
			return nil, fmt.Errorf("invalid database name in the URL: %w", err)
		}
		c.path = &path
		p = strings.TrimPrefix(p, "/"+path)
	}
	if q, ok := strings.CutPrefix(p, "?"); ok && q != "" {
		for _, pair := range strings.Split(q, "&") {
			rawKey, rawValue, ok := strings.Cut(pair, "=")
			if !ok {
				return nil, fmt.Errorf("invalid URL query parameter %q: it has no '='", rawKey)
			}
			key, err := decode(rawKey)
			if err != nil {
				return nil, fmt.Errorf("invalid URL query parameter %q: %w", rawKey, err)
			}
			value, err := decode(rawValue)
			if err != nil {
				return nil, fmt.Errorf("invalid value of the URL query parameter %q: %w", key, err)
			}
			c.params = append(c.params, param{key: canonical(key), value: value, raw: pair})
		}
	}
	return c, nil
}

func parseKeywords(s string) (*ConnString, error) {
	c := &ConnString{}
	const space = " \t\n\r\v\f"
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, fmt.Errorf("invalid connection string: %q has no '=' (write keyword=value pairs, or a postgres:// URL)", s)
		}
		key := strings.Trim(s[:eq], space)
		if key == "" || strings.ContainsAny(key, space) {
			return nil, fmt.Errorf("invalid connection string: bad keyword %q before '='", key)
		}
		s = strings.TrimLeft(s[eq+1:], space)
		start := s
		var value strings.Builder
		if strings.HasPrefix(s, "'") {
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
				if i < len(s) {
					value.WriteByte(s[i])
				}
			}
			if i >= len(s) {
				return nil, fmt.Errorf("invalid connection string: the quoted value of %s has no closing quote", key)
			}
			s = s[i+1:]
		} else {
			i := 0
			for ; i < len(s) && !strings.ContainsRune(space, rune(s[i])); i++ {
				if s[i] == '\\' {
					i++
				}
				if i < len(s) {
					value.WriteByte(s[i])
				}
			}
			s = s[min(i, len(s)):]
		}
		raw := key + "=" + start[:len(start)-len(s)]
		c.params = append(c.params, param{key: canonical(key), value: value.String(), raw: raw})
		s = strings.TrimLeft(s, space)
	}
	return c, nil
}

// canonical is the name a setting is known by: "database" is "dbname".
func canonical(key string) string {
	if key == "database" {
		return "dbname"
	}
	return key
}

// IsURL reports whether the string is a URL (else keyword/value).
func (c *ConnString) IsURL() bool { return c.isURL }

// Get returns the setting key (a libpq keyword: "dbname", "sslmode",
// "connect_timeout", ...) and whether the string sets it. A URL's user,
// password, host, port and dbname come from its query when set there (as
// pgx reads them), else from the URL's other parts; host and port are
// comma-separated lists for several hosts.
func (c *ConnString) Get(key string) (string, bool) {
	key = canonical(key)
	for i := len(c.params) - 1; i >= 0; i-- {
		if c.params[i].key == key {
			return c.params[i].value, true
		}
	}
	if !c.isURL {
		return "", false
	}
	switch key {
	case "user", "password":
		user, password, _, _ := c.userPassword()
		if key == "user" {
			return user, user != ""
		}
		return password, password != ""
	case "dbname":
		if c.path == nil || *c.path == "" {
			return "", false
		}
		db, _ := decode(*c.path)
		return db, true
	case "host", "port":
		hosts, ports := c.hostsPorts()
		list := hosts
		if key == "port" {
			list = ports
		}
		joined := strings.Join(list, ",")
		return joined, strings.Trim(joined, ",") != ""
	}
	return "", false
}

// Set sets the setting key to value, where the string already sets it,
// else where its form puts it: in a URL, user and password go to the
// userinfo, host and port to the host list, dbname to the path, any other
// setting to the query; in a keyword/value string, a pair at the end.
func (c *ConnString) Set(key, value string) {
	key = canonical(key)
	found := false
	for i := range c.params {
		if c.params[i].key == key {
			c.params[i].value, c.params[i].raw, found = value, "", true
		}
	}
	if c.isURL {
		switch key {
		case "user", "password":
			user, password, hasPassword, _ := c.userPassword()
			if key == "user" {
				user = value
			} else {
				password, hasPassword = value, true
			}
			ui := encode(user)
			if hasPassword {
				ui += ":" + encode(password)
			}
			c.userinfo = &ui
			return
		case "dbname":
			db := encode(value)
			c.path = &db
			return
		case "host", "port":
			if !strings.Contains(value, "/") { // a socket directory goes to the query
				c.setNetloc(key, value)
				return
			}
		}
	}
	if !found {
		c.params = append(c.params, param{key: key, value: value})
	}
}

// userPassword decodes the URL's userinfo.
func (c *ConnString) userPassword() (user, password string, hasPassword bool, err error) {
	if c.userinfo == nil {
		return "", "", false, nil
	}
	rawUser, rawPassword, hasPassword := strings.Cut(*c.userinfo, ":")
	if user, err = decode(rawUser); err != nil {
		return "", "", false, fmt.Errorf("invalid user name in the URL: %w", err)
	}
	if password, err = decode(rawPassword); err != nil {
		return "", "", false, errors.New("invalid password in the URL: bad percent-encoding (write %25 for a %)")
	}
	return user, password, hasPassword, nil
}

// hostsPorts splits the URL's host list into its hosts and ports (decoded;
// "" where one is left out).
func (c *ConnString) hostsPorts() (hosts, ports []string) {
	if c.netloc == "" {
		return nil, nil
	}
	for _, hp := range splitNetloc(c.netloc) {
		host, port := hp, ""
		if strings.HasPrefix(hp, "[") {
			if end := strings.IndexByte(hp, ']'); end > 0 {
				host, port = hp[1:end], strings.TrimPrefix(hp[end+1:], ":")
			}
		} else if i := strings.LastIndexByte(hp, ':'); i >= 0 {
			host, port = hp[:i], hp[i+1:]
		}
		host, _ = decode(host)
		port, _ = decode(port)
		hosts, ports = append(hosts, host), append(ports, port)
	}
	return hosts, ports
}

// splitNetloc splits a host list at the commas outside brackets.
func splitNetloc(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// setNetloc writes the URL's host list again with the hosts or the ports
// set to value (a comma-separated list). Without one port per host, the
// first applies to every host.
func (c *ConnString) setNetloc(key, value string) {
	hosts, ports := c.hostsPorts()
	if key == "host" {
		hosts = strings.Split(value, ",")
	} else {
		ports = strings.Split(value, ",")
	}
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	var b strings.Builder
	for i, h := range hosts {
		if i > 0 {
			b.WriteByte(',')
		}
		if strings.Contains(h, ":") {
			b.WriteString("[" + h + "]")
		} else {
			b.WriteString(encode(h))
		}
		port := ""
		switch {
		case len(ports) == len(hosts):
			port = ports[i]
		case len(ports) > 0:
			port = ports[0]
		}
		if port != "" {
			b.WriteString(":" + encode(port))
		}
	}
	c.netloc = b.String()
}

// String returns the connection string in its own form.
func (c *ConnString) String() string {
	if !c.isURL {
		parts := make([]string, len(c.params))
		for i, p := range c.params {
			parts[i] = p.raw
			if p.raw == "" {
				parts[i] = p.key + "=" + quote(p.value)
			}
		}
		return strings.Join(parts, " ")
	}
	var b strings.Builder
	b.WriteString(c.scheme)
	if c.userinfo != nil {
		b.WriteString(*c.userinfo + "@")
	}
	b.WriteString(c.netloc)
	if c.path != nil {
		b.WriteString("/" + *c.path)
	}
	for i, p := range c.params {
		b.WriteByte("?&"[min(i, 1)])
		if p.raw != "" {
			b.WriteString(p.raw)
		} else {
			b.WriteString(encode(p.key) + "=" + encode(p.value))
		}
	}
	return b.String()
}

// URL returns the connection string as a URL, for programs that read only
// that form: a URL as it is; a keyword/value string's user, password,
// hosts, ports and dbname in the URL's parts (a socket directory host in
// its query), every other setting in its query.
func (c *ConnString) URL() string {
	if c.isURL {
		return c.String()
	}
	u := &ConnString{isURL: true, scheme: "postgres://"}
	hostInQuery := false
	if h, ok := c.Get("host"); ok && strings.Contains(h, "/") {
		hostInQuery = true
	}
	for _, key := range []string{"user", "password", "host", "port", "dbname"} {
		if v, ok := c.Get(key); ok && !(hostInQuery && (key == "host" || key == "port")) {
			u.Set(key, v)
		}
	}
	for _, p := range c.params {
		switch p.key {
		case "user", "password", "dbname":
			continue
		case "host", "port":
			if !hostInQuery {
				continue
			}
		}
		if v, _ := c.Get(p.key); v == p.value { // the last of repeated keys
			u.Set(p.key, v)
		}
	}
	return u.String()
}

// Redacted returns the connection string with its password, if any,
// replaced by xxxxx: for messages and logs.
func (c *ConnString) Redacted() string {
	if _, ok := c.Get("password"); !ok {
		return c.String()
	}
	r := c.clone()
	r.Set("password", "xxxxx")
	return r.String()
}

func (c *ConnString) clone() *ConnString {
	r := *c
	r.params = append([]param(nil), c.params...)
	return &r
}

// WithDatabase returns s pointed at the database db, in its own form.
func WithDatabase(s, db string) (string, error) {
	c, err := Parse(s)
	if err != nil {
		return "", err
	}
	c.Set("dbname", db)
	return c.String(), nil
}

// WithConnectTimeout returns s with connect_timeout set to
// ConnectTimeoutDefault, unless s sets connect_timeout or the environment
// sets PGCONNECT_TIMEOUT (which pgx reads, as libpq does).
func WithConnectTimeout(s string) (string, error) {
	c, err := Parse(s)
	if err != nil {
		return "", err
	}
	if _, ok := c.Get("connect_timeout"); ok {
		return s, nil
	}
	if os.Getenv("PGCONNECT_TIMEOUT") != "" {
		return s, nil
	}
	c.Set("connect_timeout", strconv.Itoa(int(ConnectTimeoutDefault/time.Second)))
	return c.String(), nil
}

// quote writes a keyword/value string's value, quoted when it must be.
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\v\f'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// encode percent-encodes every byte of a URL part but the unreserved ones.
func encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || strings.IndexByte("-._~", ch) >= 0 {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

// decode undoes percent-encoding, as pgx does ('+' is a plus).
func decode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("bad percent-encoding (write %25 for a %)")
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || n == 0 {
			return "", errors.New("bad percent-encoding (write %25 for a %)")
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}
