package io.pidquota.plugin;

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Follows pidquota's state topic (one partition, compacted) from its beginning into a
 * {@link ThrottleState}, on a daemon thread of its own: an authorization never waits for it.
 *
 * <p>Faults: a topic that does not exist yet, is deleted, or a cluster that does not answer is
 * said once in the broker's log and retried every {@code RETRY}; meanwhile the state is what it
 * was, and its heartbeat grows old, so the plug-in refuses nothing once that is over its bound.
 * A deleted topic clears the state at once. A record pidquota would not write is skipped and said
 * (the first of each kind of reason, then counted).
 */
final class StateReader implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(StateReader.class);
    static final Duration RETRY = Duration.ofSeconds(2);

    private final ThrottleState state;
    private final String topic;
    private final Properties props;
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong read = new AtomicLong();
    private volatile boolean running = true;
    private volatile KafkaConsumer<byte[], byte[]> consumer;
    private String lastProblem;
    private final Thread thread;

    StateReader(ThrottleState state, String topic, Map<String, Object> clientConfigs, String name) {
        this.state = state;
        this.topic = topic;
        this.props = new Properties();
        props.putAll(clientConfigs);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        // never create the state topic: pidquota creates it, compacted and with its ACLs
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        props.putIfAbsent(ConsumerConfig.CLIENT_ID_CONFIG, name);
        this.thread = new Thread(this, name);
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    long skipped() {
        return skipped.get();
    }

    long read() {
        return read.get();
    }

    @Override
    public void run() {
        while (running) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                consumer = c;
                follow(c);
            } catch (WakeupException e) {
                return;
            } catch (Exception e) {
                say("cannot read the state topic " + topic + " (" + e + "); refusing nothing once the heartbeat is old; retrying");
            }
            pause();
        }
    }

    private void follow(KafkaConsumer<byte[], byte[]> c) {
        List<PartitionInfo> parts = c.partitionsFor(topic, Duration.ofSeconds(10));
        if (parts == null || parts.isEmpty()) {
            state.clear();
            say("the state topic " + topic + " does not exist (yet): refusing nothing");
            return;
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        c.assign(Collections.singletonList(tp));
        c.seekToBeginning(Collections.singletonList(tp));
        say(null);
        long checked = System.nanoTime();
        while (running) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                read.incrementAndGet();
                String why = state.apply(r.key(), r.value());
                if (why != null && skipped.getAndIncrement() < 20) {
                    LOG.warn("pidquota plug-in: {} offset {} skipped, not applied: {}", topic, r.offset(), why);
                }
            }
            if (System.nanoTime() - checked > RETRY.toNanos()) {  // deleted meanwhile: forget it
                checked = System.nanoTime();
                List<PartitionInfo> now = c.partitionsFor(topic, Duration.ofSeconds(10));
                if (now == null || now.isEmpty()) {
                    state.clear();
                    say("the state topic " + topic + " was deleted: refusing nothing");
                    return;
                }
            }
        }
    }

    /** One line per change of problem (none: {@code null}), not one per retry. */
    private void say(String problem) {
        if (problem == null ? lastProblem == null : problem.equals(lastProblem)) {
            return;
        }
        if (problem == null) {
            LOG.info("pidquota plug-in: reading the state topic {}", topic);
        } else {
            LOG.warn("pidquota plug-in: {}", problem);
        }
        lastProblem = problem;
    }

    private void pause() {
        try {
            Thread.sleep(RETRY.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            running = false;
        }
    }

    void close() {
        running = false;
        KafkaConsumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
        thread.interrupt();
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
