package io.pidquota.plugin;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import javax.management.ObjectName;
import javax.management.StandardMBean;
import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.AuthorizerServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's own {@link StandardAuthorizer}, which also refuses InitProducerId (API key 22) to the
 * principals that pidquota throttles, cluster-wide: every broker follows pidquota's compacted
 * state topic ({@link ThrottleState}, {@link StateReader}).
 *
 * <p>On InitProducerId the broker asks {@code authorize(IDEMPOTENT_WRITE, CLUSTER)}, then
 * {@code authorizeByResourceType(WRITE, TOPIC)} (an idempotent producer), or
 * {@code authorize(WRITE, TRANSACTIONAL_ID)} (a transactional one); refused, the client gets
 * CLUSTER_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Every other request,
 * Produce included, goes to Kafka's authorizer untouched after one integer comparison, so a
 * throttled user's producers that already have their PID keep producing.
 *
 * <p>Never refused: super users; anyone while pidquota's heartbeat is older than its bound or
 * dated ahead of the broker's clock, the switch is off, or the state is over its bound (fail
 * open). A principal is matched by its type and name, as Kafka's own authorizer matches ACLs
 * (not by {@code toString()}, which a custom principal class may change). Each refusal goes to
 * Kafka's audit log ({@code kafka.authorizer.logger}) as Kafka's own denials do. Broker
 * settings ({@code server.properties}):
 * <pre>
 * authorizer.class.name=io.pidquota.plugin.PidQuotaAuthorizer
 * # a listener the plug-in's consumer reads from
 * pidquota.plugin.bootstrap.servers=HOST:PORT
 * # the default
 * pidquota.plugin.topic=pidquota-throttle-state
 * # any client setting of its consumer and its status producer, prefixed
 * pidquota.plugin.consumer.security.protocol=...
 * # where it reports whether it obeys (the default)
 * pidquota.plugin.status.topic=pidquota-plugin-status
 * # where it publishes each InitProducerId it answers, pidquota's input (the default; false: none)
 * pidquota.plugin.inits.topic=pidquota-plugin-inits
 * pidquota.plugin.inits.enable=true
 * </pre>
 * Worked example: pidquota writes {@code t:User:crash = now + 60 s} and heartbeats every batch;
 * within a second every broker answers User:crash's InitProducerId with error 31, while
 * User:crash's running producers and every other user are served as before.
 */
public class PidQuotaAuthorizer extends StandardAuthorizer {
    private static final Logger LOG = LoggerFactory.getLogger(PidQuotaAuthorizer.class);
    /** Kafka's own authorizer audit log, where StandardAuthorizer says its denials. */
    private static final Logger AUDIT = LoggerFactory.getLogger("kafka.authorizer.logger");
    static final short INIT_PRODUCER_ID = 22;
    static final String PREFIX = "pidquota.plugin.";
    static final String DEFAULT_TOPIC = "pidquota-throttle-state";
    static final String DEFAULT_STATUS_TOPIC = "pidquota-plugin-status";
    static final String DEFAULT_INITS_TOPIC = "pidquota-plugin-inits";
    /** How often the state reader describes pidquota's topics ({@code pidquota.plugin.check.ms}):
     * a topic made, remade or deleted is seen within it; its back-offs follow it. */
    static final long DEFAULT_CHECK_MS = 5_000;
    static final long MIN_CHECK_MS = 200;
    static final long MAX_CHECK_MS = 60_000;

    private final ThrottleState state = new ThrottleState();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong looked = new AtomicLong();
    private final AtomicLong lookedNanos = new AtomicLong();
    private final AtomicLong faults = new AtomicLong();
    private final Set<String> superUsers = new HashSet<>();
    private final AtomicReference<String> openSaid = new AtomicReference<>("");
    private volatile StateReader reader;
    private StatusReporter reporter;
    private InitsPublisher inits;
    /** Set while Kafka's own authorizeByResourceType asks authorize() inside ours. */
    private final ThreadLocal<Boolean> asked = new ThreadLocal<>();
    private String initsTopic = DEFAULT_INITS_TOPIC;
    private boolean initsOn = true;
    private String statusTopic = DEFAULT_STATUS_TOPIC;
    private ObjectName mbean;
    private String topic = DEFAULT_TOPIC;
    private Map<String, Object> clientConfigs = new HashMap<>();
    private final Set<String> controllerListeners = new HashSet<>();
    private Object checkValue;

    @Override
    public void configure(Map<String, ?> configs) {
        super.configure(configs);
        Object users = configs.get("super.users");
        if (users != null) {
            for (String u : users.toString().split(";")) {
                if (!u.isBlank()) {
                    superUsers.add(u.trim());
                }
            }
        }
        Object t = configs.get(PREFIX + "topic");
        if (t != null && !t.toString().isBlank()) {
            topic = t.toString().trim();
        }
        Object st = configs.get(PREFIX + "status.topic");
        if (st != null && !st.toString().trim().isEmpty()) {
            statusTopic = st.toString().trim();
        }
        Object it = configs.get(PREFIX + "inits.topic");
        if (it != null && !it.toString().trim().isEmpty()) {
            initsTopic = it.toString().trim();
        }
        checkValue = configs.get(PREFIX + "check.ms");  // read where the state reader starts
        Object on = configs.get(PREFIX + "inits.enable");
        if (on != null) {  // read as a person types it, as the state topic's switch
            String v = on.toString().trim().toLowerCase(Locale.ROOT);
            initsOn = !(v.equals("false") || v.equals("off") || v.equals("0") || v.equals("no"));
        }
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            if (e.getKey().startsWith(PREFIX + "consumer.")) {
                clientConfigs.put(e.getKey().substring((PREFIX + "consumer.").length()), e.getValue());
            }
        }
        Object bootstrap = configs.get(PREFIX + "bootstrap.servers");
        if (bootstrap != null) {
            clientConfigs.put("bootstrap.servers", bootstrap.toString());
        }
        Object controllers = configs.get("controller.listener.names");
        if (controllers != null) {
            for (String name : controllers.toString().split(",")) {
                controllerListeners.add(name.trim().toUpperCase(Locale.ROOT));
            }
        }
    }

    /** {@code pidquota.plugin.check.ms} as given: a whole number of milliseconds from
     * {@code MIN_CHECK_MS} to {@code MAX_CHECK_MS}, else the default, said in one line that names
     * the value and the range (never a broker that does not start): once, by the broker's
     * authorizer as its state reader starts, not by a controller's. */
    static long checkMs(Object value) {
        if (value == null || value.toString().trim().isEmpty()) {
            return DEFAULT_CHECK_MS;
        }
        try {
            long ms = Long.parseLong(value.toString().trim());
            if (ms >= MIN_CHECK_MS && ms <= MAX_CHECK_MS) {
                return ms;
            }
        } catch (NumberFormatException e) {
            // said below
        }
        LOG.warn("pidquota plug-in: {}check.ms={} is not a whole number of milliseconds from {} to {}; "
            + "using {}", PREFIX, value, MIN_CHECK_MS, MAX_CHECK_MS, DEFAULT_CHECK_MS);
        return DEFAULT_CHECK_MS;
    }

    /**
     * Whether this instance serves a KRaft controller alone: a node that is broker and
     * controller builds one authorizer for each, and only the broker's sees InitProducerId
     * (the controller's needs no state reader, and its metrics would hide the broker's).
     */
    private boolean controllerOnly(AuthorizerServerInfo serverInfo) {
        Collection<Endpoint> endpoints = serverInfo.endpoints();
        return !endpoints.isEmpty() && endpoints.stream()
            .allMatch(e -> controllerListeners.contains(listenerOf(e).toUpperCase(Locale.ROOT)));
    }

    /** An endpoint's listener name: {@code listener()} where the broker has it (Kafka 4.1 on,
     * which deprecates {@code listenerName()}), else {@code listenerName()}; "" if neither. */
    static String listenerOf(Endpoint e) {
        for (String method : new String[] {"listener", "listenerName"}) {
            try {
                Object name = Endpoint.class.getMethod(method).invoke(e);
                if (name instanceof java.util.Optional) {
                    name = ((java.util.Optional<?>) name).orElse(null);
                }
                if (name != null) {
                    return name.toString();
                }
            } catch (ReflectiveOperationException | RuntimeException absent) {
                // the next one
            }
        }
        return "";
    }

    @Override
    public Map<Endpoint, ? extends CompletionStage<Void>> start(AuthorizerServerInfo serverInfo) {
        Map<Endpoint, ? extends CompletionStage<Void>> started = super.start(serverInfo);
        if (controllerOnly(serverInfo)) {
            LOG.info("pidquota plug-in: a controller's authorizer: it refuses nothing, reads no state");
            return started;
        }
        String name = "pidquota-plugin-" + serverInfo.brokerId();
        if (!clientConfigs.containsKey("bootstrap.servers")) {
            LOG.error("pidquota plug-in: no {}bootstrap.servers: it refuses nothing", PREFIX);
        } else {
            reporter = new StatusReporter(statusTopic, serverInfo.brokerId(), clientConfigs, name);
            List<String> written = new ArrayList<>(Collections.singletonList(statusTopic));
            if (initsOn) {
                inits = new InitsPublisher(initsTopic, serverInfo.brokerId(), clientConfigs, name);
                written.add(initsTopic);
                inits.start();
            }
            reader = new StateReader(state, topic, written, clientConfigs, name, this::tick, checkMs(checkValue));
            reader.start();
        }
        register(serverInfo.brokerId());
        return started;
    }

    @Override
    public List<AuthorizationResult> authorize(AuthorizableRequestContext context, List<Action> actions) {
        if (context.requestType() != INIT_PRODUCER_ID || asked.get() != null) {
            return super.authorize(context, actions);  // asked.get(): Kafka's own question inside ours
        }
        boolean no = refuses(context);
        List<AuthorizationResult> results;
        if (no) {
            refused.incrementAndGet();
            for (Action action : actions) {
                audit(context, action.operation(), action.resourcePattern(), action.logIfDenied());
            }
            results = new ArrayList<>(Collections.nCopies(actions.size(), AuthorizationResult.DENIED));
        } else {
            results = super.authorize(context, actions);
        }
        sense(context, actions, results, no);
        return results;
    }

    @Override
    public AuthorizationResult authorizeByResourceType(
        AuthorizableRequestContext context, AclOperation op, ResourceType resourceType) {
        if (context.requestType() != INIT_PRODUCER_ID) {
            return super.authorizeByResourceType(context, op, resourceType);
        }
        boolean no = refuses(context);
        AuthorizationResult result;
        if (no) {
            audit(context, op, null, true);  // an idempotent producer's last question: its refusal
            result = AuthorizationResult.DENIED;
        } else {
            // Kafka's default authorizeByResourceType asks authorize(WRITE, TOPIC "hardcode") first:
            // that one is Kafka's, not the broker's, and our rule was just asked
            asked.set(Boolean.TRUE);
            try {
                result = super.authorizeByResourceType(context, op, resourceType);
            } finally {
                asked.remove();
            }
        }
        if (inits != null) {  // the idempotent producer's answer: this question comes only after a DENIED
            inits.offer(context, null, outcome(no, result));
        }
        return result;
    }

    /** An InitProducerId's answer, published once per request ({@link InitsPublisher}): at a
     * transactional id's WRITE; at an idempotent producer's IDEMPOTENT_WRITE when it is granted
     * there, else at its second and last question, {@code authorizeByResourceType(WRITE, TOPIC)},
     * which the broker asks only after a DENIED and whose answer is the request's. Never throws. */
    private void sense(AuthorizableRequestContext context, List<Action> actions, List<AuthorizationResult> results,
                       boolean no) {
        if (inits == null) {
            return;
        }
        try {
            for (int i = 0; i < actions.size(); i++) {
                Action a = actions.get(i);
                ResourceType type = a.resourcePattern().resourceType();
                if (a.operation() == AclOperation.WRITE && type == ResourceType.TRANSACTIONAL_ID) {
                    inits.offer(context, a.resourcePattern().name(), outcome(no, results.get(i)));
                    return;
                }
                if (a.operation() == AclOperation.IDEMPOTENT_WRITE && type == ResourceType.CLUSTER) {
                    if (!no && results.get(i) == AuthorizationResult.ALLOWED) {
                        inits.offer(context, null, InitsPublisher.Outcome.GRANTED);
                    }
                    return;
                }
            }
        } catch (RuntimeException e) {
            faults.incrementAndGet();
        }
    }

    static InitsPublisher.Outcome outcome(boolean no, AuthorizationResult result) {
        return no ? InitsPublisher.Outcome.REFUSED
            : result == AuthorizationResult.ALLOWED ? InitsPublisher.Outcome.GRANTED : InitsPublisher.Outcome.DENIED;
    }

    /** {@link #judge}, failing open: whatever goes wrong in the plug-in's own rule (a context
     * without an address, a bug), the request goes to Kafka's own authorizer. */
    private boolean refuses(AuthorizableRequestContext context) {
        try {
            return judge(context);
        } catch (RuntimeException e) {
            if (faults.getAndIncrement() == 0) {
                LOG.warn("pidquota plug-in: its rule failed, and it refuses nothing for that request (said once; "
                    + "counted in RuleFaults): {}", e.toString());
            }
            return false;
        }
    }

    /** A refusal in Kafka's audit log, worded as StandardAuthorizer words its denials: INFO when
     * it is the request's answer (a transactional id's WRITE, which the broker asks to log; an
     * idempotent producer's WRITE on any topic, its second and last question), else TRACE (an
     * idempotent producer's IDEMPOTENT_WRITE, which the broker asks not to log as it asks again).
     * One INFO line per refused request, in the file Kafka's logging gives that logger. */
    private static void audit(AuthorizableRequestContext context, AclOperation op, ResourcePattern on, boolean loud) {
        try {
            auditLine(context, op, on, loud);
        } catch (RuntimeException e) {  // a line not written never fails the answer
            LOG.debug("pidquota plug-in: an audit line not written: {}", e.toString());
        }
    }

    private static void auditLine(AuthorizableRequestContext context, AclOperation op, ResourcePattern on, boolean loud) {
        if (loud ? !AUDIT.isInfoEnabled() : !AUDIT.isTraceEnabled()) {
            return;
        }
        String resource = on == null ? "Topic:ANY" : on.resourceType() + ":" + on.patternType() + ":" + on.name();
        String line = String.format("Principal = %s is Denied operation = %s from host = %s on resource = %s "
            + "for request = InitProducerId with resourceRefCount = 1 based on rule pidquota's throttle of %s",
            context.principal(), op, context.clientAddress().getHostAddress(), resource, nameOf(context.principal()));
        if (loud) {
            AUDIT.info(line);
        } else {
            AUDIT.trace(line);
        }
    }

    /** {@code TYPE:NAME}, as the state topic and {@code super.users} name a principal. */
    static String nameOf(KafkaPrincipal p) {
        return p.getPrincipalType() + ":" + p.getName();
    }

    /** InitProducerId of this principal (or of this client id of it) is refused now (a super user
     * never is). */
    private boolean judge(AuthorizableRequestContext context) {
        long t0 = System.nanoTime();
        String principal = nameOf(context.principal());
        long now = System.currentTimeMillis();
        boolean open = watch(now) != null;
        boolean no = !open && !superUsers.contains(principal) && state.refuses(principal, context.clientId(), now);
        looked.incrementAndGet();
        lookedNanos.addAndGet(System.nanoTime() - t0);
        return no;
    }

    /** After each check of the state topic (the reader's thread): a change of the fail-open state
     * said, and this broker's report to pidquota when one is due. */
    private void tick() {
        long now = System.currentTimeMillis();
        watch(now);
        reporter.maybeReport(state, now, refused.get(), reader.read(), reader.exists(statusTopic));
        if (inits != null) {
            inits.ready(reader.exists(inits.topic()));
        }
    }

    /** Why nothing is refused now (null: the set is obeyed), said once at each change. */
    private String watch(long now) {
        String why = state.openBecause(now);
        String key = why == null ? "obeying" : why;
        String before = openSaid.get();
        if (!key.equals(before) && openSaid.compareAndSet(before, key)) {
            if (why != null) {
                LOG.warn("pidquota plug-in: refusing nothing ({})", why);
            } else {
                LOG.info("pidquota plug-in: obeying pidquota's throttle set");
            }
        }
        return why;
    }

    private void register(int brokerId) {
        try {
            mbean = new ObjectName("io.pidquota:type=PidQuotaAuthorizer,broker=" + brokerId);
            // a StandardMBean of the interface: a class named Stats may not implement
            // PluginStatsMBean as a plain standard MBean (JMX wants StatsMBean), and was refused
            ManagementFactory.getPlatformMBeanServer()
                    .registerMBean(new StandardMBean(new Stats(), PluginStatsMBean.class), mbean);
        } catch (Exception e) {  // a second authorizer in one JVM (tests): the first one's stays
            LOG.warn("pidquota plug-in: its JMX metrics are not registered: {}", e.toString());
            mbean = null;
        }
    }

    @Override
    public void close() throws java.io.IOException {
        if (reader != null) {
            reader.close();
        }
        if (reporter != null) {
            reporter.close();
        }
        if (inits != null) {
            inits.close();
        }
        if (mbean != null) {
            try {
                ManagementFactory.getPlatformMBeanServer().unregisterMBean(mbean);
            } catch (Exception e) {
                LOG.debug("pidquota plug-in: unregistering its metrics: {}", e.toString());
            }
        }
        super.close();
    }

    /** The JMX view of this authorizer. */
    public final class Stats implements PluginStatsMBean {
        @Override
        public long getRefused() {
            return refused.get();
        }

        @Override
        public int getFailOpen() {
            return state.openBecause(System.currentTimeMillis()) == null ? 0 : 1;
        }

        @Override
        public String getFailOpenReason() {
            String why = state.openBecause(System.currentTimeMillis());
            return why == null ? "" : why;
        }

        @Override
        public long getRuleFaults() {
            return faults.get();
        }

        @Override
        public int getEntries() {
            return state.size();
        }

        @Override
        public long getStatusReportsSent() {
            return reporter == null ? 0 : reporter.sent();
        }

        @Override
        public long getStatusReportsFailed() {
            return reporter == null ? 0 : reporter.failed();
        }

        @Override
        public int getThrottled() {
            return state.throttled(System.currentTimeMillis());
        }

        @Override
        public long getSkippedRecords() {
            return reader == null ? 0 : reader.skipped();
        }

        @Override
        public long getRecordsRead() {
            return reader == null ? 0 : reader.read();
        }

        @Override
        public long getCheckMs() {
            StateReader r = reader;
            return r == null ? 0 : r.checkMs();
        }

        @Override
        public long getInitsPublished() {
            return inits == null ? 0 : inits.published();
        }

        @Override
        public long getInitsDropped() {
            return inits == null ? 0 : inits.dropped();
        }

        @Override
        public long getInitsFailed() {
            return inits == null ? 0 : inits.failed();
        }

        @Override
        public int getInitsQueued() {
            return inits == null ? 0 : inits.queued();
        }

        @Override
        public long getMeanInitAuthorizationNanos() {
            long n = looked.get();
            return n == 0 ? 0 : lookedNanos.get() / n;
        }
    }
}
