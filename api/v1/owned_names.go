package v1

// The Secrets the operator owns for a RedisCluster <name>, by suffix: resources names them from
// these, and the API refuses a RedisCluster (or a RedisBackup of it) whose references name one
// of them, since the operator would overwrite or delete the user's Secret, or hand an
// application the operator's password.
const (
	// GeneratedPasswordSecretSuffix: the default user's password, generated when spec.auth is
	// not set.
	GeneratedPasswordSecretSuffix = "-auth"
	// AuthConfSecretSuffix: the nodes' auth configuration (passwords' hashes, masterauth).
	AuthConfSecretSuffix = "-auth-conf"
	// PreviousPasswordSecretSuffix: the password a rotation keeps valid for a while.
	PreviousPasswordSecretSuffix = "-auth-previous"
	// OperatorSecretSuffix: the operator's own user's password.
	OperatorSecretSuffix = "-operator"
)

// DataClaimPattern matches the data claims of RedisCluster <name> (written in at the start of
// the name, which holds no regular-expression character): data-<statefulset>-<ordinal>. A
// backup destination may not be one of them.
const DataClaimPattern = `^data-%s(-shard[0-9]+)?-[0-9]+$`

// ImageReferencePattern is the grammar of an image reference the kubelet pulls
// (github.com/distribution/reference's ParseNormalizedNamed, which it calls): an optional
// registry (with a dot or a port, or localhost, and only then any case), lowercase path
// components, an optional tag, an optional digest of a known algorithm with its full length.
const ImageReferencePattern = `^(` + imageDomain + `/)?` + imagePath + `(/` + imagePath + `)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?$`

const (
	imageDomainComponent = `([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	imagePath            = `[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*`
	// A registry: localhost, a name with a dot, a port or a capital letter, or an [IPv6]
	// address (which the field's first pattern, older, refuses).
	imageDomain = `(localhost(:[0-9]+)?|` + imageDomainComponent + `([.]` + imageDomainComponent + `)+(:[0-9]+)?|` + imageDomainComponent + `:[0-9]+|` +
		`([a-zA-Z0-9-]*[A-Z][a-zA-Z0-9-]*)(:[0-9]+)?|\[[a-fA-F0-9:]+\](:[0-9]+)?)`
)
