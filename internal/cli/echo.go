package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// Every error that echoes what the user gave (a flag value, an argument, a
// field name of standard input) quotes it with termsafe.Echo: clipped to a
// short prefix and escaped, so that a 100 KB value or a terminal escape
// never reaches standard error whole. The command's own errors call it
// directly; the errors that cobra and pflag make are rewritten here.

// flagError rewrites pflag's errors about the command line with
// termsafe.Echo: pflag repeats a bad value in full (twice for a number)
// and an unknown flag's name raw, escapes included.
func flagError(err error) error {
	var (
		iv *pflag.InvalidValueError
		nx *pflag.NotExistError
		sx *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &iv):
		return fmt.Errorf("invalid argument %s for --%s: %s", termsafe.Echo(iv.GetValue()), iv.GetFlag().Name, wantedValue(iv))
	case errors.As(err, &nx):
		if sh := nx.GetSpecifiedShortnames(); sh != "" {
			return fmt.Errorf("unknown shorthand flag %s in %s", termsafe.Echo(nx.GetSpecifiedName()), termsafe.Echo("-"+sh))
		}
		name := "--" + nx.GetSpecifiedName()
		if q := termsafe.Echo(name); q != `"`+name+`"` {
			name = q // clipped or escaped
		}
		return fmt.Errorf("unknown flag: %s", name)
	case errors.As(err, &sx):
		return fmt.Errorf("bad flag syntax %s", termsafe.Echo(sx.GetSpecifiedFlag()))
	}
	return err
}

// wantedValue says what a flag of iv's type takes. pflag's own cause
// would repeat the value ("strconv.ParseInt: parsing ...").
func wantedValue(iv *pflag.InvalidValueError) string {
	switch t := iv.GetFlag().Value.Type(); t {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		var ne *strconv.NumError
		if errors.As(iv.Unwrap(), &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return "the number is out of range"
		}
		return "give a whole number"
	case "int64Slice", "intSlice", "int32Slice", "uintSlice":
		return "give whole numbers, comma-separated or in repeated flags"
	case "float32", "float64":
		return "give a number"
	case "duration":
		return "give a duration such as 500ms, 30s or 5m"
	case "bool":
		return "give true or false"
	default:
		return "give a value of type " + t
	}
}

// goQuoted matches a string quoted the way %q quotes it.
var goQuoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// clipQuoted re-quotes with termsafe.Echo each %q-quoted string in a
// message made by cobra ("unknown command %q for %q") or by a parser, so
// that a long argument is clipped there too. Text that is not a Go quoted
// string is left as it is.
func clipQuoted(msg string) string {
	return goQuoted.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil {
			return q
		}
		return termsafe.Echo(s)
	})
}

// errorText is the text Main prints for the error a command line ended
// with. The commands' own errors quote input with termsafe.Echo already;
// the ones cobra makes (an unknown command, a wrong number of arguments)
// are clipped here.
func errorText(err error) string {
	var (
		u  *usageError
		op *opError
		in *inputError
	)
	if errors.As(err, &u) || errors.As(err, &op) || errors.As(err, &in) {
		return err.Error()
	}
	return clipQuoted(err.Error())
}
