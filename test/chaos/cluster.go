package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoPostgres reports that the PostgreSQL server programs (initdb,
// pg_ctl) are not installed, so no throwaway cluster can be made.
var ErrNoPostgres = errors.New("no PostgreSQL server programs found (initdb and pg_ctl in /usr/lib/postgresql/*/bin or on PATH): install PostgreSQL and PgQ (Debian: apt-get install postgresql postgresql-<major>-pgq3)")

// FindBinDir returns the bin directory of the newest installed PostgreSQL
// server (Debian's layout first, then PATH), or ErrNoPostgres.
func FindBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir string
		v   int
	}
	var cs []cand
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || !executable(filepath.Join(d, "initdb")) || !executable(filepath.Join(d, "pg_ctl")) {
			continue
		}
		cs = append(cs, cand{d, v})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].v > cs[j].v })
	if len(cs) > 0 {
		return cs[0].dir, nil
	}
	initdb, err1 := exec.LookPath("initdb")
	_, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return filepath.Dir(initdb), nil
	}
	return "", ErrNoPostgres
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// ClusterOptions configures NewCluster. Zero values mean the defaults.
type ClusterOptions struct {
	// Parent is the directory under which the cluster's own directory is
	// made. Defaults to os.TempDir().
	Parent string
	// Port is the TCP port on 127.0.0.1. Defaults to a free port.
	Port int
	// BinDir holds initdb and pg_ctl. Defaults to FindBinDir().
	BinDir string
	// MaxConnections is the server's max_connections. Defaults to 400.
	MaxConnections int
	// Logf receives progress messages. Defaults to discarding them.
	Logf func(format string, args ...any)
	// Listen adds addresses the server listens on beside 127.0.0.1, and
	// Trust networks (CIDR) whose clients it lets in without a password:
	// for workers in a network namespace of their own.
	Listen, Trust []string
}

// Cluster is a throwaway PostgreSQL cluster of its own, in its own
// directory and on its own port, that the chaos run may restart at will.
// It never touches any other server. Methods are not safe for concurrent use.
type Cluster struct {
	Dir    string // the cluster's directory: data/, postgresql.log
	BinDir string
	Port   int
	asPG   *user.User // run server programs as this OS user (when we are root)
	logf   func(format string, args ...any)
}

// NewCluster creates a cluster (initdb, trust authentication, TCP on
// 127.0.0.1 only) and starts it. Close stops and deletes it. As root, the
// server programs run as the OS user postgres, as scripts/devdb.sh does.
func NewCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if o.BinDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		o.BinDir = d
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 400
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp(o.Parent, "pqchaos-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, BinDir: o.BinDir, Port: o.Port, logf: o.Logf}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, but there is no OS user postgres to run the PostgreSQL server as: %w", err)
		}
		c.asPG = u
		if err := c.chown(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		// The OS user postgres must reach the directory (a TMPDIR under
		// /root, mode 700, it cannot): fall back to /tmp.
		if c.run(ctx, "", "test", "-w", dir) != nil && o.Parent == "" {
			os.RemoveAll(dir)
			o.Parent = "/tmp"
			c.logf("chaos: the OS user postgres cannot reach %s; using /tmp", filepath.Dir(dir))
			return NewCluster(ctx, o)
		}
	}
	if err := c.initdb(ctx, o.MaxConnections, o.Listen, o.Trust); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.start(ctx, o.Port == 0); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) chown(path string) error {
	if c.asPG == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.asPG.Uid)
	gid, _ := strconv.Atoi(c.asPG.Gid)
	return os.Chown(path, uid, gid)
}

// run runs a server program of BinDir (dir "": a program on PATH), as the
// OS user postgres when we are root.
func (c *Cluster) run(ctx context.Context, dir, prog string, args ...string) error {
	bin := prog
	if dir != "" {
		bin = filepath.Join(dir, prog)
	}
	var cmd *exec.Cmd
	if c.asPG != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asPG.Username, "--", bin}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", prog, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "postgresql.log") }

func (c *Cluster) initdb(ctx context.Context, maxConns int, listen, trust []string) error {
	c.logf("chaos: initdb of a throwaway cluster in %s", c.Dir)
	if err := c.run(ctx, c.BinDir, "initdb", "-D", c.data(), "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--no-locale", "--no-sync"); err != nil {
		return err
	}
	conf := fmt.Sprintf(`
# --- throwaway cluster of the chaos suite (test/chaos) ---
listen_addresses = '%s'
unix_socket_directories = ''
max_connections = %d
# Fast, yet every acknowledged commit survives a crash of the server (the
# restarts here), though not of the machine: with fsync off, a commit still
# writes its WAL to the kernel before it returns. synchronous_commit must
# stay on: off, an immediate shutdown loses the last commits the server
# acknowledged, and the harness, which counts what was acknowledged, would
# wait for events that no longer exist.
fsync = off
synchronous_commit = on
full_page_writes = off
log_min_messages = warning
log_line_prefix = '%%m [%%p] '
`, strings.Join(append([]string{"127.0.0.1"}, listen...), ","), maxConns)
	var hba strings.Builder
	for _, n := range trust {
		fmt.Fprintf(&hba, "host all all %s trust\n", n)
	}
	for _, a := range []struct{ file, text string }{{"postgresql.conf", conf}, {"pg_hba.conf", hba.String()}} {
		f, err := os.OpenFile(filepath.Join(c.data(), a.file), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(a.text); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	lf, err := os.OpenFile(c.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	lf.Close()
	return c.chown(c.LogFile())
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) start(ctx context.Context, pickPort bool) error {
	var err error
	for try := 0; try < 3; try++ {
		if pickPort {
			if c.Port, err = freePort(); err != nil {
				return err
			}
		}
		c.logf("chaos: starting the cluster on 127.0.0.1:%d", c.Port)
		if err = c.run(ctx, c.BinDir, "pg_ctl", "-D", c.data(), "-l", c.LogFile(), "-o", "-p "+strconv.Itoa(c.Port), "-w", "-t", "60", "start"); err == nil {
			return nil
		}
		if !pickPort {
			break
		}
	}
	return fmt.Errorf("start the throwaway cluster: %w (server log: %s)", err, c.LogFile())
}

// Restart restarts the server with pg_ctl restart. mode is "fast" (clients
// are disconnected, a clean shutdown) or "immediate" (the server processes
// quit at once and the restart runs crash recovery). It returns when the
// server accepts connections again.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if mode != "fast" && mode != "immediate" && mode != "smart" {
		return fmt.Errorf("restart mode %q: use fast or immediate", mode)
	}
	return c.run(ctx, c.BinDir, "pg_ctl", "-D", c.data(), "-l", c.LogFile(), "-o", "-p "+strconv.Itoa(c.Port),
		"-m", mode, "-w", "-t", "60", "restart")
}

// URL is the connection string of database db as the superuser postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Close stops the server and deletes the cluster's directory. It is safe
// to call more than once.
func (c *Cluster) Close() error {
	if c.Dir == "" {
		return nil
	}
	var err error
	if _, serr := os.Stat(filepath.Join(c.data(), "postmaster.pid")); serr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = c.run(ctx, c.BinDir, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "-t", "60", "stop")
		cancel()
	}
	if rerr := os.RemoveAll(c.Dir); err == nil {
		err = rerr
	}
	c.Dir = ""
	return err
}

// Keep stops the server but leaves the directory, for a post-mortem.
func (c *Cluster) Keep() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.run(ctx, c.BinDir, "pg_ctl", "-D", c.data(), "-m", "fast", "-w", "-t", "60", "stop")
	d := c.Dir
	c.Dir = ""
	return d
}
