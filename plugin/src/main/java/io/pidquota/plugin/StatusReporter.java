package io.pidquota.plugin;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Each broker's plug-in says, through Kafka, whether it obeys pidquota's set: one small record
 * a {@code EVERY} to pidquota's status topic (compacted, keyed {@code broker:ID}), read by the run
 * and by {@code pidquota actuator status}. A broker that cannot read the state usually cannot
 * write either, and its silence says as much: pidquota takes a report older than a few of these
 * as "not obeying".
 *
 * <p>The record, one line of JSON: {@code {"broker":1,"at_ms":...,"obeying":true,"why":"",
 * "heartbeat_ms":...,"entries":3,"refused":12,"read":40}}: when it was made; whether the plug-in
 * refuses now what the set says, else why not (one of {@link ThrottleState#openBecause}'s
 * phrases); the time of the newest heartbeat of pidquota's it has read (-1: none), so pidquota
 * can tell a plug-in that reads an old state; its entries, refusals and records read.
 *
 * <p>Never on a request thread (the state reader's, after each check of the topic), never
 * blocking ({@code max.block.ms=0}: a send without metadata yet fails and the next one a few
 * seconds later goes), a buffer of {@code BUFFER} bytes; nothing is sent until a heartbeat of
 * pidquota's was read, so the broker never makes the topic itself (pidquota does, compacted).
 * A failure is counted and said once per change, as the reader says its problems.
 */
final class StatusReporter {
    private static final Logger LOG = LoggerFactory.getLogger(StatusReporter.class);
    static final Duration EVERY = Duration.ofSeconds(5);
    static final int BUFFER = 256 * 1024;

    private final String topic;
    private final int brokerId;
    private final Properties props = new Properties();
    private final AtomicLong failed = new AtomicLong();
    private final AtomicLong sent = new AtomicLong();
    private KafkaProducer<byte[], byte[]> producer;
    private long lastNanos;
    private int inARow;
    private boolean broken;
    private boolean warned;

    StatusReporter(String topic, int brokerId, Map<String, Object> clientConfigs, String name) {
        this.topic = topic;
        this.brokerId = brokerId;
        props.putAll(producerBase(clientConfigs, name + "-status"));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "0");
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Integer.toString(BUFFER));
        props.put(ProducerConfig.ACKS_CONFIG, "1");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");  // no PID of its own
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
    }

    /** What each of the plug-in's producers takes: the operator's client settings a producer
     * knows (pidquota.plugin.consumer.*), quiet reconnects, no rebootstrapping spin (as the
     * reader's admin client), byte arrays. */
    static Properties producerBase(Map<String, Object> clientConfigs, String clientId) {
        Properties props = new Properties();
        for (Map.Entry<String, Object> e : clientConfigs.entrySet()) {
            if (ProducerConfig.configNames().contains(e.getKey())) {
                props.put(e.getKey(), e.getValue());
            }
        }
        props.putIfAbsent(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "2000");
        props.putIfAbsent(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "60000");
        props.putIfAbsent(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        props.putIfAbsent("metadata.recovery.strategy", "none");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return props;
    }

    long failed() {
        return failed.get();
    }

    long sent() {
        return sent.get();
    }

    /** Sends this broker's report if one is due ({@code EVERY}) and a heartbeat was ever read. */
    void maybeReport(ThrottleState state, long nowMs, long refused, long read, boolean topicExists) {
        long t = System.nanoTime();
        if (broken || (lastNanos != 0 && t - lastNanos < EVERY.toNanos())) {
            return;
        }
        long heartbeat = state.heartbeatAt();
        if (heartbeat < 0 || !topicExists) {  // never the broker's own making of pidquota's topic
            return;
        }
        lastNanos = t;
        String why = state.openBecause(nowMs);
        String json = "{\"broker\":" + brokerId + ",\"at_ms\":" + nowMs + ",\"obeying\":" + (why == null)
            + ",\"why\":\"" + (why == null ? "" : why.replace("\\", "\\\\").replace("\"", "\\\"")) + "\""
            + ",\"heartbeat_ms\":" + heartbeat + ",\"entries\":" + state.size() + ",\"refused\":" + refused
            + ",\"read\":" + read + "}";
        if (producer == null) {
            try {
                producer = new KafkaProducer<>(props);
            } catch (Exception e) {  // a setting it refuses: no retry, no config dump every 5 s
                broken = true;
                LOG.warn("pidquota plug-in: no reports to pidquota's status topic {}: its producer cannot be made "
                    + "({}); pidquota will say this broker does not obey", topic, e.toString());
                return;
            }
        }
        try {
            producer.send(
                new ProducerRecord<>(topic, ("broker:" + brokerId).getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    json.getBytes(java.nio.charset.StandardCharsets.UTF_8)),
                (meta, e) -> done(e));
        } catch (Exception e) {  // no metadata yet (max.block.ms=0), a closed producer, a bad setting
            done(e);
        }
    }

    /** A send's outcome (the producer's thread, or the reader's): said when three in a row
     * fail (the first send of a new producer has no metadata yet, by design), and once when they
     * go again. */
    private synchronized void done(Exception e) {
        if (e == null) {
            sent.incrementAndGet();
            inARow = 0;
            if (warned) {
                warned = false;
                LOG.info("pidquota plug-in: its reports reach the status topic {} again", topic);
            }
            return;
        }
        failed.incrementAndGet();
        if (++inARow >= 3 && !warned) {
            warned = true;
            LOG.warn("pidquota plug-in: cannot write its report to the status topic {} ({}); pidquota will "
                + "say this broker does not obey; trying again every {} s", topic, e.getClass().getSimpleName(),
                EVERY.getSeconds());
        }
    }

    void close() {
        if (producer != null) {
            try {
                producer.close(Duration.ofSeconds(2));
            } catch (Exception e) {
                LOG.debug("pidquota plug-in: closing its status producer: {}", e.toString());
            }
        }
    }
}
