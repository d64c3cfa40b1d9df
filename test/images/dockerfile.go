package images

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Build is what FromDockerfile needs besides the Dockerfile.
type Build struct {
	// Context is the build context: COPY and ADD sources are relative to it.
	Context string
	// Bases are the images a FROM may name (besides scratch), by name.
	Bases map[string]v1.Image
	// Programs are the programs a RUN may start: a path in the base image, and the same program
	// on this machine, which runs in its place.
	Programs map[string]string
}

// FromDockerfile builds the image a Dockerfile of this project describes, without a container
// engine, for the instructions bundle.Dockerfile and catalog.Dockerfile use: one FROM (scratch,
// or one of b.Bases), LABEL, COPY and ADD of the context's files and directories, ENTRYPOINT
// and CMD in their exec form, and RUN, in its exec form, of one of b.Programs. A RUN runs that
// program on this machine with every absolute path of its arguments taken inside the image's
// new files, which is what it would see in the image as long as it reads and writes only those
// (opm building its cache of /configs does). The files land in one layer over the base. Any other
// instruction or form is refused, naming the line.
func FromDockerfile(dockerfile string, b Build) (v1.Image, error) {
	f, err := os.Open(dockerfile)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	staged, err := os.MkdirTemp("", "image-build-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(staged) }()

	s := &dockerfileBuild{Build: b, staged: staged, config: v1.Config{Labels: map[string]string{}}}
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		if err := s.do(strings.ToUpper(instr), strings.TrimSpace(rest)); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", dockerfile, n, line, err)
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if s.base == nil {
		return nil, fmt.Errorf("%s: no FROM", dockerfile)
	}
	files, err := treeOf(staged)
	if err != nil {
		return nil, err
	}
	for i := range files {
		// Owned by root as COPY makes them, or by the user a RUN ran as; directories keep the
		// modes images give them.
		owner := s.ranBy[files[i].Path]
		if files[i].Path == "/tmp" {
			owner = [2]int{} // as every image has it
		}
		files[i].UID, files[i].GID = owner[0], owner[1]
		if files[i].Mode.IsDir() {
			files[i].Mode = fs.ModeDir | 0o755
			if files[i].Path == "/tmp" {
				files[i].Mode = fs.ModeDir | fs.ModeSticky | 0o777
			}
		}
	}
	return appendLayer(s.base, files, s.config)
}

// dockerfileBuild is a build under way: the base, the image's config so far, and its new files,
// staged in a directory as they will be in the image.
type dockerfileBuild struct {
	Build
	staged string
	base   v1.Image
	config v1.Config
	// ranBy owns what a RUN made: the image's user then, as with docker build (COPY and ADD
	// make files owned by root).
	ranBy map[string][2]int
}

// do carries out one instruction.
func (s *dockerfileBuild) do(instr, rest string) error {
	switch instr {
	case "FROM":
		return s.from(rest)
	case "LABEL":
		key, value, ok := strings.Cut(rest, "=")
		if !ok || strings.ContainsAny(value, " \"") {
			return errors.New("one key=value without quotes or spaces")
		}
		s.config.Labels[key] = value
	case "COPY", "ADD":
		parts := strings.Fields(rest)
		if len(parts) != 2 || strings.HasPrefix(parts[0], "--") {
			return errors.New("one source of the context and one destination")
		}
		return copyInto(filepath.Join(s.Context, parts[0]), s.staged, parts[1])
	case "ENTRYPOINT", "CMD":
		var args []string
		if err := json.Unmarshal([]byte(rest), &args); err != nil {
			return errors.New("the exec form only (a JSON array)")
		}
		if instr == "ENTRYPOINT" {
			s.config.Entrypoint = args
		} else {
			s.config.Cmd = args
		}
	case "RUN":
		return s.run(rest)
	default:
		return errors.New("not an instruction this builder knows")
	}
	return nil
}

func (s *dockerfileBuild) from(name string) error {
	if s.base != nil {
		return errors.New("one FROM only")
	}
	if name == "scratch" {
		s.base = mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	} else if s.base = s.Bases[name]; s.base == nil {
		return fmt.Errorf("no base image %s was given", name)
	}
	cf, err := s.base.ConfigFile()
	if err != nil {
		return err
	}
	s.config = *cf.Config.DeepCopy()
	if s.config.Labels == nil {
		s.config.Labels = map[string]string{}
	}
	return nil
}

// run starts the program of a RUN on this machine, in the image's new files.
func (s *dockerfileBuild) run(rest string) error {
	var args []string
	if err := json.Unmarshal([]byte(rest), &args); err != nil || len(args) == 0 {
		return errors.New("the exec form only (a JSON array)")
	}
	program, ok := s.Programs[args[0]]
	if !ok {
		return fmt.Errorf("no program %s was given to run in its place", args[0])
	}
	before, err := treeOf(s.staged)
	if err != nil {
		return err
	}
	existed := map[string]bool{}
	for _, f := range before {
		existed[f.Path] = true
	}
	if out, err := exec.Command(program, insideRoot(s.staged, args[1:])...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	uid, gid, err := userIDs(s.config.User)
	if err != nil {
		return err
	}
	after, err := treeOf(s.staged)
	if err != nil {
		return err
	}
	if s.ranBy == nil {
		s.ranBy = map[string][2]int{}
	}
	for _, f := range after {
		if !existed[f.Path] {
			s.ranBy[f.Path] = [2]int{uid, gid}
		}
	}
	return nil
}

// userIDs reads an image config's numeric User ("uid" or "uid:gid"; empty is root).
func userIDs(user string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("the image's user %q is not numeric", user)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, fmt.Errorf("the image's group %q is not numeric", user)
		}
	}
	return uid, gid, nil
}

// insideRoot takes every absolute path of args (alone, or after a flag's "=") inside root.
func insideRoot(root string, args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch flag, value, ok := strings.Cut(a, "="); {
		case strings.HasPrefix(a, "/"):
			out[i] = filepath.Join(root, a)
		case ok && strings.HasPrefix(flag, "-") && strings.HasPrefix(value, "/"):
			out[i] = flag + "=" + filepath.Join(root, value)
		default:
			out[i] = a
		}
	}
	return out
}

// copyInto copies a file, or a directory's tree, to dest in the image whose files are staged
// under root: a directory's contents go into dest, as COPY dir /dest/ does; a file into a dest
// that ends with "/" keeps its name.
func copyInto(src, root, dest string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	dst := filepath.Join(root, dest)
	if !info.IsDir() {
		if strings.HasSuffix(dest, "/") {
			dst = filepath.Join(dst, filepath.Base(src))
		}
		return copyFile(src, dst, info.Mode().Perm())
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(p, target, info.Mode().Perm())
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, raw, mode)
}

// OPMImage is the name of opm's image, which catalog.Dockerfile builds on, the catalog
// server's pods run and OLM's bundle unpack Jobs extract bundles with: the opm built here (make
// opm, static) at /bin/opm, and grpc_health_probe (make grpc-health-probe), OLM's probe of a
// registry pod, as the published opm images hold them.
const OPMImage = "quay.io/operator-framework/opm:v1.73.0"

// OLMImage is the name of OLM's image, which its bundle unpack Jobs take cpb from ("util").
const OLMImage = "quay.io/operator-framework/olm:v0.38.0"

// OPM is opm's image around opm, a static build of operator-registry's cmd/opm, with
// healthProbe (a static grpc_health_probe) when given, and busybox under /busybox as the
// published images have it (on distroless/static:debug).
func OPM(opm, healthProbe string) (v1.Image, error) {
	binaries := map[string]string{"/bin/opm": opm}
	if healthProbe != "" {
		binaries["/bin/grpc_health_probe"] = healthProbe
	}
	img, err := Static(binaries, []string{"/bin/opm"})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config
	cfg.User = fmt.Sprintf("%d", OPMUID)
	if img, err = mutate.Config(img, cfg); err != nil {
		return nil, err
	}
	return withBusybox(img)
}

// OPMUID is the user opm's images run as (operator-registry's Dockerfiles say USER 1001), and the
// one OLM's catalog operator gives the registry pods it makes (--set-workload-user-id): the cache
// a catalog image's RUN builds is theirs, so that opm serving it may take its lock.
const OPMUID = 1001

// OLMUtil is OLM's image as its bundle unpack Jobs use it: cpb (OLM's util/cpb, static) and the
// cp that hands it over (./cp, static), in /bin. OLM's operators themselves run as processes
// on the node (test/localcluster), not from this image.
func OLMUtil(cpb, cp string) (v1.Image, error) {
	return Static(map[string]string{"/bin/cpb": cpb, "/bin/cp": cp}, nil)
}

// Bundle is the bundle image bundle.Dockerfile describes, from the tree at root (make bundle).
func Bundle(root string) (v1.Image, error) {
	return FromDockerfile(filepath.Join(root, "bundle.Dockerfile"), Build{Context: root})
}

// Catalog is the catalog image catalog.Dockerfile describes, from the tree at root (make
// catalog): catalog/ at /configs on opm's image, with the cache opm builds of it, by the opm
// the image holds.
func Catalog(root, opm, healthProbe string) (v1.Image, error) {
	return CatalogOf(root, root, opm, healthProbe)
}

// CatalogOf is the catalog image of root's catalog.Dockerfile over the build context dir (its
// catalog/ directory), as Catalog is of root's own catalog/.
func CatalogOf(root, dir, opm, healthProbe string) (v1.Image, error) {
	base, err := OPM(opm, healthProbe)
	if err != nil {
		return nil, err
	}
	return FromDockerfile(filepath.Join(root, "catalog.Dockerfile"), Build{Context: dir,
		Bases: map[string]v1.Image{OPMImage: base}, Programs: map[string]string{"/bin/opm": opm}})
}

// BundleOf is the bundle image of root's bundle.Dockerfile over the build context dir (its
// bundle/ directory): an earlier release's bundle, laid out as bundle/ is.
func BundleOf(root, dir string) (v1.Image, error) {
	return FromDockerfile(filepath.Join(root, "bundle.Dockerfile"), Build{Context: dir})
}
