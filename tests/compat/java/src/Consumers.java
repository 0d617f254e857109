import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** DefaultMQPushConsumer scenarios: what each listener is handed, in which order, and the offsets after. */
final class Consumers {
    private Consumers() {
    }

    static final MessageQueueSelector BY_IDX =
        (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());

    /** One delivery as the listener saw it (``seq``: its place among the deliveries of its queue). */
    static final class Delivery {
        final String consumer;
        final int seq;
        final MessageExt msg;

        Delivery(String consumer, int seq, MessageExt msg) {
            this.consumer = consumer;
            this.seq = seq;
            this.msg = msg;
        }
    }

    static final List<Delivery> deliveries = new ArrayList<>();
    static final Map<String, AtomicInteger> seqs = new TreeMap<>();
    static final AtomicLong lastDelivery = new AtomicLong();

    static synchronized void record(String consumer, MessageExt m) {
        int seq = seqs.computeIfAbsent(consumer + "/" + m.getQueueId(), k -> new AtomicInteger()).getAndIncrement();
        deliveries.add(new Delivery(consumer, seq, m));
        lastDelivery.set(System.currentTimeMillis());
    }

    static synchronized int delivered() {
        return deliveries.size();
    }

    static DefaultMQPushConsumer consumer(String group, String name) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, Driver.rpcHook(), new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName(name);
        c.setMessageModel(MessageModel.valueOf(Driver.opt("model", "CLUSTERING")));
        String from = Driver.opt("from", "first");
        c.setConsumeFromWhere(from.equals("first") ? ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                : from.equals("last") ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
                : ConsumeFromWhere.CONSUME_FROM_TIMESTAMP);
        c.setConsumeTimestamp(Driver.opt("timestamp", new SimpleDateFormat("yyyyMMddHHmmss").format(new Date())));
        String filter = Driver.opt("filter", "tag:*");
        String topic = Driver.opt("topic");
        if (filter.startsWith("sql:")) {
            c.subscribe(topic, MessageSelector.bySql(filter.substring(4)));
        } else {
            c.subscribe(topic, filter.substring(4));
        }
        c.setMaxReconsumeTimes(Driver.intOpt("maxReconsumeTimes", 16));
        return c;
    }

    static DefaultMQProducer producer(String topic) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("pg_" + topic, Driver.rpcHook());
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("p-" + System.nanoTime());
        p.start();
        return p;
    }

    /** Send numbered messages ``from``..``to``-1, message i to queue i % queues (a selector: no randomness). */
    /** The topic created and its first ``n`` numbered messages sent; the producer stays open for more. */
    static DefaultMQProducer seeded(String topic, int n) throws Exception {
        Driver.createTopic(topic);
        DefaultMQProducer p = producer(topic);
        send(p, topic, 0, n);
        return p;
    }

    static void send(DefaultMQProducer p, String topic, int from, int to) throws Exception {
        for (int i = from; i < to; i++) {
            p.send(Driver.numbered(topic, i), BY_IDX, i);
        }
    }

    /** Until every consumer holds its share of the queues (clustering) or all of them (broadcasting). */
    static void settle(List<DefaultMQPushConsumer> cs, int queues) throws Exception {
        boolean broadcast = Driver.opt("model", "CLUSTERING").equals("BROADCASTING");
        long end = Driver.deadline();
        while (true) {
            boolean ok = true;
            for (DefaultMQPushConsumer c : cs) {
                long held = c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()
                        .stream().filter(mq -> mq.getTopic().equals(Driver.opt("topic"))).count();
                ok &= held == (broadcast ? queues : queues / cs.size());
            }
            if (ok) {
                return;
            }
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("consumers did not settle on the queues");
            }
            Thread.sleep(100);
        }
    }

    /** Until ``expect`` deliveries came and then none for ``quiet`` ms (a duplicate would show). */
    static void await(int expect) throws Exception {
        long end = Driver.deadline();
        int quiet = Driver.intOpt("quiet", 2000);
        while (delivered() < expect || System.currentTimeMillis() - lastDelivery.get() < quiet) {
            if (System.currentTimeMillis() > end) {
                break;
            }
            Thread.sleep(50);
        }
    }

    static void emitDeliveries(boolean ordered) {
        List<Delivery> ds;
        synchronized (Consumers.class) {
            ds = new ArrayList<>(deliveries);
        }
        // concurrently: no order is promised, so (queue, offset) order; orderly: each queue in arrival order
        ds.sort((a, b) -> {
            int c = a.consumer.compareTo(b.consumer);
            if (c == 0) {
                c = a.msg.getTopic().compareTo(b.msg.getTopic());
            }
            if (c == 0) {
                c = Integer.compare(a.msg.getQueueId(), b.msg.getQueueId());
            }
            if (c == 0) {
                c = ordered ? Integer.compare(a.seq, b.seq) : Long.compare(a.msg.getQueueOffset(), b.msg.getQueueOffset());
            }
            if (c == 0) {
                c = Integer.compare(a.msg.getReconsumeTimes(), b.msg.getReconsumeTimes());
            }
            return c;
        });
        for (Delivery d : ds) {
            Driver.emit("consumed", "consumer", d.consumer, "message", Driver.message(d.msg));
        }
    }

    /**
     * Commits ``c``'s consume offsets with a request the broker answers, then shuts it down. 4.9's shutdown
     * commits them oneway and closes the channel at once: a broker (Apache's too, seen in CI) can lose that
     * last commit, and the offsets read next would be the broker's luck, not its behaviour.
     */
    static void stop(DefaultMQPushConsumer c) throws Exception {
        OffsetStore store = c.getDefaultMQPushConsumerImpl().getOffsetStore();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            long offset = store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
            if (offset >= 0) {
                store.updateConsumeOffsetToBroker(mq, offset, false);
            }
        }
        c.shutdown();
    }

    static void emitOffsets(String group) throws Exception {
        DefaultMQAdminExt a = Driver.admin();
        try {
            // a 4.9 client commits offsets oneway (shutdown, the 5 s timer): the broker may apply them after
            // this query starts, on a busy machine by seconds, so wait (bounded) until every queue caught up
            ConsumeStats cs = a.examineConsumeStats(group);
            long deadline = System.currentTimeMillis() + 8000;
            while (System.currentTimeMillis() < deadline && cs.getOffsetTable().values().stream()
                    .anyMatch(w -> w.getConsumerOffset() < w.getBrokerOffset())) {
                Thread.sleep(200);
                cs = a.examineConsumeStats(group);
            }
            for (Map.Entry<MessageQueue, OffsetWrapper> e : new TreeMap<>(cs.getOffsetTable()).entrySet()) {
                Driver.emit("offset", "queue", Driver.queue(e.getKey()),
                        "brokerOffset", e.getValue().getBrokerOffset(), "consumerOffset", e.getValue().getConsumerOffset());
            }
        } finally {
            a.shutdown();
        }
    }

    static void push() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group");
        int queues = Driver.intOpt("queues", 4);
        int pre = Driver.intOpt("pre", 0);
        int n = Driver.intOpt("n", 8);
        boolean orderly = Driver.opt("listener", "concurrently").equals("orderly");
        DefaultMQProducer p = seeded(topic, pre);
        if (Driver.opt("from", "first").equals("timestamp")) {
            // the consumer starts at the first message stored at or after this second
            Thread.sleep(1100);
            Driver.opts.put("timestamp", new SimpleDateFormat("yyyyMMddHHmmss").format(new Date()));
            Thread.sleep(1100);
        }
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (int k = 0; k < Driver.intOpt("consumers", 1); k++) {
            String name = "c" + k;
            DefaultMQPushConsumer c = consumer(group, name);
            if (orderly) {
                c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                    msgs.forEach(m -> record(name, m));
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            } else {
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    msgs.forEach(m -> record(name, m));
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            }
            c.start();
            cs.add(c);
        }
        settle(cs, queues);
        send(p, topic, pre, pre + n);
        await(Driver.intOpt("expect", n));
        for (DefaultMQPushConsumer c : cs) {
            stop(c);
        }
        p.shutdown();
        emitDeliveries(orderly);
        if (Driver.opt("model", "CLUSTERING").equals("CLUSTERING")) {
            emitOffsets(group);
        }
    }

    /**
     * RECONSUME_LATER (next try after delay level ``--level``): a message goes to %RETRY%group, comes back
     * with reconsumeTimes + 1, and after maxReconsumeTimes failures to %DLQ%group.
     */
    static void retry() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group");
        int n = Driver.intOpt("n", 2);
        int failures = Driver.intOpt("failures", 100);
        int level = Driver.intOpt("level", 1);
        Driver.createTopic(topic);
        DefaultMQProducer p = producer(topic);
        DefaultMQPushConsumer c = consumer(group, "c0");
        // one thread: the failed messages go back to the broker in the order they came
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(m -> record("c0", m));
            if (msgs.get(0).getReconsumeTimes() < failures) {
                ctx.setDelayLevelWhenNextConsume(level);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        settle(List.of(c), Driver.intOpt("queues", 4));
        for (int i = 0; i < n; i++) {
            p.send(Driver.numbered(topic, i), BY_IDX, 0);  // one queue: one pull hands them over in order
        }
        await(Driver.intOpt("expect", n));
        stop(c);
        p.shutdown();
        emitDeliveries(true);
        emitOffsets(group);
        String dlq = "%DLQ%" + group;
        int dead = Driver.intOpt("dead", 0);
        if (dead > 0) {
            Driver.readBack(dlq, null, dead);
        }
    }

    /** A consumer whose SQL92 expression the broker cannot parse: what start() throws. */
    static void badSql() throws Exception {
        String topic = Driver.opt("topic");
        Driver.createTopic(topic);
        DefaultMQPushConsumer c = consumer(Driver.opt("group"), "c0");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            c.start();
            Driver.emit("started");
        } catch (Exception e) {
            Driver.emit("start", "error", Driver.error(e));
        } finally {
            c.shutdown();
        }
    }
}
