package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeDomains records what SettleSource asks of libvirt.
type fakeDomains struct {
	calls []string
	err   error
}

func (f *fakeDomains) Undefine(_ context.Context, name string) error {
	f.calls = append(f.calls, "undefine "+name)
	return f.err
}

func (f *fakeDomains) DisableAutostart(_ context.Context, name string) error {
	f.calls = append(f.calls, "autostart --disable "+name)
	return f.err
}

func TestSettleSource(t *testing.T) {
	for _, c := range []struct {
		p     SourcePolicy
		calls string
		moved bool
		says  string
	}{
		{Undefine, "undefine vm1", false, "domain vm1 undefined on this host; the VM now runs at 10.0.0.12:7010"},
		{DisableAutostart, "autostart --disable vm1", true, "autostart off"},
		{Keep, "", true, "kept on this host as it was"},
	} {
		dir := t.TempDir()
		f := &fakeDomains{}
		msg, err := SettleSource(context.Background(), f, dir, c.p, "vm1", "10.0.0.12:7010")
		if err != nil {
			t.Fatalf("%s: %v", c.p, err)
		}
		if got := strings.Join(f.calls, ","); got != c.calls {
			t.Errorf("%s: virsh %q, want %q", c.p, got, c.calls)
		}
		if !strings.Contains(msg, c.says) || !strings.Contains(msg, "10.0.0.12:7010") {
			t.Errorf("%s: says %q, want %q and where the VM runs", c.p, msg, c.says)
		}
		dest, moved := Moved(dir, "vm1")
		if moved != c.moved || (moved && dest != "10.0.0.12:7010") {
			t.Errorf("%s: moved record %v %q, want %v", c.p, moved, dest, c.moved)
		}
	}
}

// TestSettleSourceUndefineFails: the operator is told what to run, and
// the hook refuses to start the domain meanwhile.
func TestSettleSourceUndefineFails(t *testing.T) {
	dir := t.TempDir()
	f := &fakeDomains{err: errors.New("no connection")}
	_, err := SettleSource(context.Background(), f, dir, Undefine, "vm1", "h2:7010")
	if err == nil || !strings.Contains(err.Error(), "run `virsh undefine vm1` here") || !strings.Contains(err.Error(), "no connection") {
		t.Fatalf("error %v", err)
	}
	if dest, ok := Moved(dir, "vm1"); !ok || dest != "h2:7010" {
		t.Fatalf("moved record %v %q", ok, dest)
	}
}

func TestParseSourcePolicy(t *testing.T) {
	for _, s := range []string{"undefine", "disable-autostart", "keep"} {
		if p, err := ParseSourcePolicy(s); err != nil || string(p) != s {
			t.Errorf("%s: %q %v", s, p, err)
		}
	}
	if _, err := ParseSourcePolicy("destroy"); err == nil {
		t.Error("destroy accepted")
	}
}

func TestRecords(t *testing.T) {
	dir := t.TempDir()
	if Created(dir, "vm1") {
		t.Fatal("created before MarkCreated")
	}
	if err := MarkCreated(dir, "vm1"); err != nil || !Created(dir, "vm1") || Created(dir, "vm2") {
		t.Fatalf("after MarkCreated: %v", err)
	}
	if err := Released(dir, "vm1"); err != nil || Created(dir, "vm1") {
		t.Fatalf("after Released: %v", err)
	}
	if err := Released(dir, "vm1"); err != nil {
		t.Fatalf("Released twice: %v", err)
	}
	if _, err := os.Stat(filepath.Join(Dir(dir))); err != nil {
		t.Fatal(err)
	}
}

// TestVirshCommandLines runs Virsh against a stand-in program that
// records its arguments (and the file define is given), and one that
// fails.
func TestVirshCommandLines(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	stand := filepath.Join(dir, "virsh")
	script := "#!/bin/sh\necho \"$@\" >>" + args + "\n" +
		"if [ \"$3\" = define ]; then cat \"$4\" >>" + args + "; fi\n" +
		"if [ \"$3\" = dumpxml ]; then echo \"<domain><name>$5</name></domain>\"; fi\n"
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := Virsh{Path: stand, URI: "qemu:///system"}
	if err := v.Undefine(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if err := v.DisableAutostart(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	x, err := v.DumpXML(ctx, "vm1")
	if err != nil || x != "<domain><name>vm1</name></domain>\n" {
		t.Fatalf("dumpxml: %q %v", x, err)
	}
	msg, err := DefineAtDestination(ctx, Virsh{Path: stand, URI: "qemu+ssh://h2/system"}, "qemu+ssh://h2/system", "vm1", x)
	if err != nil || !strings.Contains(msg, "domain vm1 defined at qemu+ssh://h2/system, shut off there") {
		t.Fatalf("define: %q %v", msg, err)
	}
	b, _ := os.ReadFile(args)
	got := regexp.MustCompile(`/\S+/gmig-domain-\d+\.xml`).ReplaceAllString(string(b), "FILE")
	want := "-c qemu:///system undefine vm1\n-c qemu:///system autostart --disable vm1\n-c qemu:///system dumpxml --inactive vm1\n" +
		"-c qemu+ssh://h2/system define FILE\n<domain><name>vm1</name></domain>\n"
	if got != want {
		t.Fatalf("virsh ran with\n%s\nwant\n%s", got, want)
	}
	fail := filepath.Join(dir, "fail")
	if err := os.WriteFile(fail, []byte("#!/bin/sh\necho \"error: failed to get domain '$1'\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = Virsh{Path: fail}.Undefine(ctx, "vm1")
	if !errors.Is(err, ErrVirsh) || !strings.Contains(err.Error(), "failed to get domain") {
		t.Fatalf("a failing virsh: %v", err)
	}
}
