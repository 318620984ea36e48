package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// errKey is the one slog key for an error across the tree; wrongErrKey is
// the other spelling, which no non-test Go source may use as a key.
const (
	errKey      = "err"
	wrongErrKey = "error"
)

// logKeyFrom is, for each slog call by method or function name, the index
// of its first key-value argument: Info(msg, kv…), InfoContext(ctx, msg,
// kv…), Log(ctx, level, msg, kv…), With(kv…), slog.Any(key, value) and
// the other Attr constructors.
var logKeyFrom = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "With": 0,
	"Any": 0, "String": 0, "Int": 0, "Int64": 0, "Uint64": 0, "Float64": 0,
	"Bool": 0, "Time": 0, "Duration": 0, "Group": 0,
}

// wrongLogKeys returns "file:line" for every slog call in src whose
// key-value arguments use wrongErrKey as a key. A call is a selector call
// named in logKeyFrom (x.Warn(…), slog.Any(…)); its keys are the string
// literals at even offsets from the first key-value argument.
func wrongLogKeys(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		from, ok := logKeyFrom[sel.Sel.Name]
		if !ok {
			return true
		}
		for i := from; i < len(call.Args); i += 2 {
			lit, ok := call.Args[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && s == wrongErrKey {
				out = append(out, fset.Position(lit.Pos()).String())
			}
		}
		return true
	})
	return out
}

// TestOneLogKeyForErrors: every non-test Go source logs an error under
// the key "err", never "error".
func TestOneLogKeyForErrors(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, at := range wrongLogKeys(fset, f) {
			t.Errorf("%s: slog key %q; the tree's key for an error is %q", at, wrongErrKey, errKey)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files; the test is not looking at the repository", files)
	}
}

// TestLogKeyCheckCatchesTheOtherKey: the check finds "error" as a key in
// every call shape it knows, and not as a message or a value.
func TestLogKeyCheckCatchesTheOtherKey(t *testing.T) {
	for _, tt := range []struct {
		src  string
		hits int
	}{
		{`log.Warn("watch failed", "error", err)`, 1},
		{`log.Error("error", "err", err)`, 0}, // "error" is the message
		{`log.Info("x", "n", 1, "error", err)`, 1},
		{`log.Info("x", "what", "error")`, 0}, // a value, not a key
		{`log.WarnContext(ctx, "x", "error", err)`, 1},
		{`log.Log(ctx, slog.LevelWarn, "x", "error", err)`, 1},
		{`log.With("error", err)`, 1},
		{`slog.Any("error", err)`, 1},
		{`log.Warn("x", "err", err)`, 0},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", "package x\nfunc f() {\n"+tt.src+"\n}\n", 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := wrongLogKeys(fset, f); len(got) != tt.hits {
			t.Errorf("%s: %d hits %v, want %d", tt.src, len(got), got, tt.hits)
		}
	}
}
