package io.streamsql;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.concurrent.atomic.AtomicReference;

/**
 * One embedded-metastore connection for all of a Spark Connect server's statements.
 *
 * <p>Hive's embedded metastore keeps its store (a JDO persistence manager over Derby) and its
 * configuration in thread-locals of {@code HiveMetaStore.HMSHandler}. Spark Connect runs every
 * statement on a thread of its own, so every statement that names a table built both again: a
 * {@code HiveConf} (Hadoop's XML resources parsed anew) and a store, 20-40 ms a statement. In a
 * process that runs dbt itself, statements reuse a few threads and pay it once per thread.
 *
 * <p>Spark calls the metastore only under one lock (its Hive client's class loader,
 * {@code HiveClientImpl.retryLocked}), so one store used by whichever thread holds the lock is
 * used as Hive uses a thread's own: by one thread at a time. {@link #share} replaces the two
 * thread-locals with slots that every thread sees. Called once, as the server starts.
 */
public final class SharedMetastoreThreadState {
    private static final String HANDLER = "org.apache.hadoop.hive.metastore.HiveMetaStore$HMSHandler";
    private static final String[] FIELDS = {"threadLocalMS", "threadLocalConf"};

    private SharedMetastoreThreadState() {}

    /** A thread-local whose value is the same for every thread. */
    static final class SharedSlot<T> extends ThreadLocal<T> {
        private final AtomicReference<T> value = new AtomicReference<>();

        @Override
        public T get() {
            return value.get();
        }

        @Override
        public void set(T newValue) {
            value.set(newValue);
        }

        @Override
        public void remove() {
            value.set(null);
        }
    }

    /** Shares the handler's store and configuration across threads; returns what it did. */
    public static String share(ClassLoader loader) throws ReflectiveOperationException {
        Class<?> handler = Class.forName(HANDLER, true, loader);
        // The fields are static and final: only Unsafe writes them (reached reflectively, so
        // that this compiles without the JDK's unsupported module).
        Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
        Field instance = unsafeClass.getDeclaredField("theUnsafe");
        instance.setAccessible(true);
        Object unsafe = instance.get(null);
        Method base = unsafeClass.getMethod("staticFieldBase", Field.class);
        Method offset = unsafeClass.getMethod("staticFieldOffset", Field.class);
        Method put = unsafeClass.getMethod("putObject", Object.class, long.class, Object.class);
        StringBuilder shared = new StringBuilder();
        for (String name : FIELDS) {
            Field field = handler.getDeclaredField(name);
            if (!ThreadLocal.class.isAssignableFrom(field.getType())) {
                throw new NoSuchFieldException(name + " is not a ThreadLocal in this Hive");
            }
            put.invoke(unsafe, base.invoke(unsafe, field), offset.invoke(unsafe, field), new SharedSlot<Object>());
            shared.append(shared.length() == 0 ? "" : ", ").append(name);
        }
        return "HMSHandler." + shared;
    }
}
