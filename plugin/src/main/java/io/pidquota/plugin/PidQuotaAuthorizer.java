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
import javax.management.ObjectName;
import javax.management.StandardMBean;
import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.ResourceType;
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
 * <p>Never refused: super users; anyone while pidquota's heartbeat is older than its bound, or
 * the switch is off (fail open). Broker settings ({@code server.properties}):
 * <pre>
 * authorizer.class.name=io.pidquota.plugin.PidQuotaAuthorizer
 * pidquota.plugin.bootstrap.servers=HOST:PORT   # a listener the plug-in's consumer reads from
 * pidquota.plugin.topic=pidquota-throttle-state # the default
 * pidquota.plugin.consumer.security.protocol=... # any consumer setting, prefixed
 * </pre>
 * Worked example: pidquota writes {@code t:User:crash = now + 60 s} and heartbeats every batch;
 * within a second every broker answers User:crash's InitProducerId with error 31, while
 * User:crash's running producers and every other user are served as before.
 */
public class PidQuotaAuthorizer extends StandardAuthorizer {
    private static final Logger LOG = LoggerFactory.getLogger(PidQuotaAuthorizer.class);
    static final short INIT_PRODUCER_ID = 22;
    static final String PREFIX = "pidquota.plugin.";
    static final String DEFAULT_TOPIC = "pidquota-throttle-state";

    private final ThrottleState state = new ThrottleState();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong looked = new AtomicLong();
    private final AtomicLong lookedNanos = new AtomicLong();
    private final Set<String> superUsers = new HashSet<>();
    private volatile boolean wasOpen = true;
    private StateReader reader;
    private ObjectName mbean;
    private String topic = DEFAULT_TOPIC;
    private Map<String, Object> clientConfigs = new HashMap<>();
    private final Set<String> controllerListeners = new HashSet<>();

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

    /**
     * Whether this instance serves a KRaft controller alone: a node that is broker and
     * controller builds one authorizer for each, and only the broker's sees InitProducerId
     * (the controller's needs no state reader, and its metrics would hide the broker's).
     */
    private boolean controllerOnly(AuthorizerServerInfo serverInfo) {
        Collection<Endpoint> endpoints = serverInfo.endpoints();
        return !endpoints.isEmpty() && endpoints.stream()
            .allMatch(e -> controllerListeners.contains(e.listenerName().orElse("").toUpperCase(Locale.ROOT)));
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
            reader = new StateReader(state, topic, clientConfigs, name);
            reader.start();
        }
        register(serverInfo.brokerId());
        return started;
    }

    @Override
    public List<AuthorizationResult> authorize(AuthorizableRequestContext context, List<Action> actions) {
        if (context.requestType() != INIT_PRODUCER_ID || !refuses(context)) {
            return super.authorize(context, actions);
        }
        refused.incrementAndGet();
        return new ArrayList<>(Collections.nCopies(actions.size(), AuthorizationResult.DENIED));
    }

    @Override
    public AuthorizationResult authorizeByResourceType(
        AuthorizableRequestContext context, AclOperation op, ResourceType resourceType) {
        if (context.requestType() == INIT_PRODUCER_ID && refuses(context)) {
            return AuthorizationResult.DENIED;
        }
        return super.authorizeByResourceType(context, op, resourceType);
    }

    /** InitProducerId of this principal (or of this client id of it) is refused now (a super user
     * never is). */
    private boolean refuses(AuthorizableRequestContext context) {
        long t0 = System.nanoTime();
        String principal = context.principal().toString();
        long now = System.currentTimeMillis();
        boolean open = !state.enabled() || !state.fresh(now);
        if (open != wasOpen) {
            wasOpen = open;
            if (open) {
                LOG.warn("pidquota plug-in: refusing nothing ({})",
                    state.enabled() ? "pidquota's heartbeat is too old or missing" : "switched off");
            } else {
                LOG.info("pidquota plug-in: obeying pidquota's throttle set");
            }
        }
        boolean no = !open && !superUsers.contains(principal) && state.refuses(principal, context.clientId(), now);
        looked.incrementAndGet();
        lookedNanos.addAndGet(System.nanoTime() - t0);
        return no;
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
            long now = System.currentTimeMillis();
            return state.enabled() && state.fresh(now) ? 0 : 1;
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
        public long getMeanInitAuthorizationNanos() {
            long n = looked.get();
            return n == 0 ? 0 : lookedNanos.get() / n;
        }
    }
}
