package record

// Default topic names, applied by Topics.WithDefaults.
const (
	DefaultMarketTopic        = "market"
	DefaultNotificationsTopic = "notifications"
	DefaultAlertsTopic        = "alerts"
	DefaultDeadLetterTopic    = "joiner-dead-letters"
)

// Topics names the four topics of a worker: the co-partitioned inputs
// (Market, the state topic, and Notifications), the Alerts output and the
// DeadLetter topic malformed input records are routed to. An empty name
// means the default.
type Topics struct {
	Market        string
	Notifications string
	Alerts        string
	DeadLetter    string
}

// WithDefaults returns t with every empty name set to its default.
func (t Topics) WithDefaults() Topics {
	set := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	set(&t.Market, DefaultMarketTopic)
	set(&t.Notifications, DefaultNotificationsTopic)
	set(&t.Alerts, DefaultAlertsTopic)
	set(&t.DeadLetter, DefaultDeadLetterTopic)
	return t
}

// All returns the four names in the order Market, Notifications, Alerts,
// DeadLetter.
func (t Topics) All() []string { return []string{t.Market, t.Notifications, t.Alerts, t.DeadLetter} }

// Inputs returns the co-partitioned input topics, the state topic first:
// the topic list a group member subscribes to.
func (t Topics) Inputs() []string { return []string{t.Market, t.Notifications} }
