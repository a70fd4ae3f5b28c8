package connstr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectCause shortens an error that holds a failed connection
// (*pgconn.ConnectError) to the one attempt that says why. pgx tries a
// connection string's addresses in turn, each twice under sslmode=prefer
// (with TLS, then without), and its error lists every attempt: the same
// "connection refused" twice, or "server refused TLS connection" before
// the wrong password that is the real cause. ConnectCause keeps the
// attempt the server answered with an error (a wrong password, no such
// database or role), else the last one (refused, timed out). The text
// around the connection error (what was being done) stays; errors.Is and
// errors.As still see the whole error. Any other error is returned as it is.
func ConnectCause(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	joined, ok := ce.Unwrap().(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	attempts := joined.Unwrap()
	if len(attempts) < 2 {
		return err
	}
	pick := attempts[len(attempts)-1]
	for _, a := range attempts {
		var pe *pgconn.PgError
		if errors.As(a, &pe) {
			pick = a
			break
		}
	}
	short := "failed to connect to `user=" + ce.Config.User + " database=" + ce.Config.Database + "`: " + pick.Error()
	return &causeError{msg: strings.Replace(err.Error(), ce.Error(), short, 1), err: err}
}

type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }
